"""Greedy decoding certified exactly: at temperature 0 every rule reduces to "accept a draft token
iff it is the target's argmax".

With greedy target rows (``sampling.probabilities`` at T = 0: the one-hot of the argmax, exact
ties to the lowest token id) and a greedy draft (one-hot rows, so the K drafts of one iteration
are one chain), the output law of a lossless rule is a point mass and no randomness is left to
any rule: τ must be the length of the draft's longest prefix that follows the target's argmax
chain, and the emitted tokens that prefix followed by the argmax after it (the correction, or
the bonus row's argmax when τ = L).  ``certify_greedy`` checks exactly that, call by call, on
random instances whose target logits are small integers (exact ties are common) and several
verifier seeds per instance; it is a deterministic check (no p-value): one wrong outcome fails.

This is not a case of the statistical suite (``gpu_backend.certify.suite``): its laws of τ are
point masses, where ``oracle.certify``'s mean test does not apply (suite.nondegenerate_case).
Run by tests/gpu_backend/engine/test_greedy_mode.py for every registered rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities

GREEDY = SamplingConfig(0.0)


@dataclass(frozen=True)
class GreedyInstance:
    """One verification call of a greedy draft against a greedy target.

    Attributes:
        draft_tokens: int64 [1, K, L], the K drafts identical (one greedy chain).
        draft_probs: float32 [1, K, L, V], one-hot at the drafted tokens.
        target_probs: float32 [1, K, L+1, V], ``probabilities(logits, T = 0)`` of integer logits.
        argmax: the lowest argmax of each target row, L+1 ints.
        tau: the expected τ (leading draft tokens equal to the argmax before them).
        tokens: the expected emitted tokens, τ + 1 of them.
    """

    draft_tokens: torch.Tensor
    draft_probs: torch.Tensor
    target_probs: torch.Tensor
    argmax: list[int]
    tau: int
    tokens: list[int]


def lowest_argmax(row) -> int:
    """The smallest index holding the row's maximum (plain Python: the definition)."""
    values = [float(v) for v in row]
    return values.index(max(values))


def greedy_instance(rng: np.random.Generator, K: int, L: int, V: int) -> GreedyInstance:
    """A random greedy instance: target logits uniform integers in [-2, 2] (ties common); the
    draft follows the argmax for a uniform number of leading positions in 0..L, then draws
    another token (a uniform token, the argmax itself a third of the time).

    Raises:
        ValueError: K, L < 1 or V < 2.
    """
    if K < 1 or L < 1 or V < 2:
        raise ValueError(f"need K >= 1, L >= 1, V >= 2, got K={K}, L={L}, V={V}")
    logits = torch.as_tensor(rng.integers(-2, 3, size=(L + 1, V)), dtype=torch.float32)
    target = probabilities(logits, GREEDY)
    argmax = [lowest_argmax(row) for row in logits]
    follow = int(rng.integers(0, L + 1))
    chain = [argmax[i] if i < follow or rng.random() >= 2 / 3 else int(rng.integers(V)) for i in range(L)]
    tau = next((i for i in range(L) if chain[i] != argmax[i]), L)
    tokens = torch.tensor(chain, dtype=torch.int64).expand(1, K, L).contiguous()
    return GreedyInstance(tokens, torch.nn.functional.one_hot(tokens, V).to(torch.float32),
                          target.expand(1, K, L + 1, V).contiguous(), argmax, tau,
                          chain[:tau] + [argmax[tau]])


@dataclass
class GreedyReport:
    """What ``certify_greedy`` checked for one rule.

    Attributes:
        rule: the rule's name; calls: verifier calls made; failures: one line per wrong call
        (empty: certified); classes: calls per outcome class, "reject at 0" (τ = 0), "inside"
        (0 < τ < L), "bonus" (τ = L).
    """

    rule: str
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    classes: dict = field(default_factory=lambda: {"reject at 0": 0, "inside": 0, "bonus": 0})

    @property
    def ok(self) -> bool:
        return not self.failures and self.calls > 0


def certify_greedy(rule: str, verifier=None, instances: int = 200, seeds_per_instance: int = 3,
                   seed: int = 27, max_K: int = 3, max_L: int = 5, max_V: int = 6) -> GreedyReport:
    """Check "accept iff the draft is the target's argmax" for ``rule`` on random greedy instances.

    Args:
        rule: a registered rule (its single-draft flag sets K = 1).
        verifier: the callable to check (default ``get_verifier(rule)``; a planted one to show
            the check fails).
        instances: random instances (K in 1..max_K, L in 1..max_L, V in 2..max_V, uniform);
            seeds_per_instance: verifier calls per instance, each with its own seed.
        seed: the instances' numpy seed (offset by the rule's name, so rules differ).
    Returns:
        GreedyReport (failures list the instance, seed, expected and returned τ and tokens).
    Raises:
        ValueError: unknown rule.
    """
    from spectr_gbv.reference.rules import registry

    from spectr_gbv.gpu_backend.verifiers import get_verifier

    single = registry.spec(rule).single_draft
    verifier = verifier if verifier is not None else get_verifier(rule)
    rng = np.random.default_rng([seed, sum(map(ord, rule))])
    report = GreedyReport(rule)
    for index in range(instances):
        K = 1 if single else int(rng.integers(1, max_K + 1))
        L, V = int(rng.integers(1, max_L + 1)), int(rng.integers(2, max_V + 1))
        inst = greedy_instance(rng, K, L, V)
        for s in rng.integers(0, 2**62, size=seeds_per_instance).tolist():
            out = verifier(inst.draft_tokens, inst.draft_probs, inst.target_probs, seeds=torch.tensor([s]))
            n = int(out.num_emitted[0])
            got = (int(out.tau[0]), out.tokens[0, :n].tolist(), out.tokens[0, n:].tolist())
            want = (inst.tau, inst.tokens, [-1] * (L + 1 - n))
            report.calls += 1
            report.classes["reject at 0" if inst.tau == 0 else "bonus" if inst.tau == L else "inside"] += 1
            if got != want:
                report.failures.append(f"instance {index} (K={K}, L={L}, V={V}, drafts {inst.draft_tokens[0, 0].tolist()}, "
                                       f"argmax {inst.argmax}), seed {s}: τ {got[0]} tokens {got[1]}, "
                                       f"expected τ {inst.tau} tokens {inst.tokens}")
    return report
