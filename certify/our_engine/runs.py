"""The engine certificate's runs (``certify.engine``): N generations of one rule through the engine,
recording per run the first token and per iteration τ with its exact law given the rows the
verifier got (``tau_law``: coins enumerated, the final draw not), and the target's exact law of
the first token (``target_first_token_law``).  Why τ's law and not the verdict's: the module
doc of ``certify.engine``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from spectr_gbv.reference.rules import get_rule, registry

from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L

LOG_EVERY = 10  # runs between two progress lines of run_rule ...
LOG_SECONDS = 30.0  # ... or seconds, whichever comes first


def row_defects(rule: str) -> tuple[str, ...]:
    """The planted defects of ``rule`` (``RuleSpec.planted``) with an exact τ law
    (``planted_laws.has_law``): a lossless row states its power against each, on its own rows
    (``defect_power``).  Empty for a planted name or a rule without one."""
    from spectr_gbv.certify.planted_laws import has_law

    if rule in registry.planted():
        return ()
    return tuple(p.name for p in registry.spec(rule).planted if has_law(p.name))


# -- exact laws --------------------------------------------------------------------------------

def tau_law(rule, draft_tokens, draft_probs, target_probs) -> np.ndarray:
    """Exact law of τ of a reference rule given fixed draft blocks (coins enumerated, the final
    draw not: see the module doc).

    Args:
        rule: a reference ``Rule`` (``reference.rules.get_rule``) or its name.
        draft_tokens: int [K, L]; draft_probs: float [K, L, V]; target_probs: float [K, L+1, V]
            (float64 rows summing to 1; ``rows_float64`` makes them from an engine record).
    Returns:
        float64 [L+1]: P(τ = t), t = 0..L.
    Raises:
        ValueError: malformed inputs (the rule's ``prepare``).
        RuntimeError: the rule tossed a coin or drew after its draw.
    """
    from spectr_gbv.reference.randomness import CoinsOnly, enumerate_law

    rule = get_rule(rule) if isinstance(rule, str) else rule
    L = np.asarray(draft_tokens).shape[-1]
    block = rule.prepare(draft_tokens, draft_probs, target_probs)
    law = enumerate_law(lambda src: rule.decide(block, CoinsOnly(src)).tau)
    out = np.zeros(L + 1)
    for tau, pr in law.items():
        out[tau] += pr
    return out / out.sum()


def rows_float64(record) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An ``engine.IterationRecord``'s verifier inputs as numpy: draft_tokens int64 [K, L],
    draft_probs and target_probs (what the verifier got, Algorithm 2 included) float64
    [K, L, V] / [K, L+1, V], each row renormalised to sum 1 (the float32 rows sum to 1 up to
    ~1e-7)."""
    dp = record.draft_probs.double().cpu().numpy()
    tp = record.target_probs.double().cpu().numpy()
    return (record.draft_tokens.cpu().numpy().astype(np.int64),
            dp / dp.sum(-1, keepdims=True), tp / tp.sum(-1, keepdims=True))


def target_first_token_law(target, prompt_ids, sampling, backend=None) -> np.ndarray:
    """The target's exact law of the token after ``prompt_ids``: the prompt fed from an empty
    cache (``Backend.plain_logits``, no cache reused), the last logits through
    ``sampling.probabilities`` (the engine's processing), float64, renormalised.

    Args:
        target: a model of ``backend`` (None: torch, a transformers causal LM; llama.cpp: a
            ``LlamaCppModel``, its cache emptied first);
        prompt_ids: list of int token ids (≥ 1);
        sampling: ``sampling.SamplingConfig``.
    Returns:
        float64 [V].
    """
    import torch

    from spectr_gbv.gpu_backend.decoding.sampling import probabilities
    from spectr_gbv.gpu_backend.torch_backend.backend import TORCH

    backend = backend if backend is not None else TORCH
    ids = torch.tensor([list(prompt_ids)], dtype=torch.int64, device=backend.device(target))
    with torch.inference_mode():
        logits = backend.plain_logits(target, len(prompt_ids), 1)(ids)
        p = probabilities(logits, sampling)[0].double().cpu().numpy()
    return p / p.sum()


# -- runs --------------------------------------------------------------------------------------

@dataclass
class Runs:
    """The N generations of one rule and what the tests need from them.

    Attributes:
        name: the rule certified (a registered rule or a planted one); base: the reference
            rule whose law is expected; K, L.
        first_tokens: int per run (the first emitted token).
        taus: the verifier's τ per iteration (all runs, in order); laws: float64 [L+1] per
            iteration, the reference τ law given that iteration's rows.
        planted_laws: for a planted defect with a reference analogue
            (``planted_laws.planted_tau_law``), its own exact τ law per iteration (what it is
            tested against is ``laws``); else empty.
        defect_laws: for a lossless rule, {planted defect of the rule with an exact law
            (``row_defects``): its exact τ law per iteration given this rule's own rows}.
        generate_s, law_s: seconds spent generating, and computing the τ laws.
    """

    name: str
    base: str
    K: int
    L: int
    first_tokens: list[int] = field(default_factory=list)
    taus: list[int] = field(default_factory=list)
    laws: list[np.ndarray] = field(default_factory=list)
    planted_laws: list[np.ndarray] = field(default_factory=list)
    defect_laws: dict = field(default_factory=dict)
    generate_s: float = 0.0
    law_s: float = 0.0


def run_rule(target, draft, name: str, prompt_ids, n_seeds: int, max_new_tokens: int,
             sampling, draft_sampling, K: int = DEFAULT_K, L: int = DEFAULT_L,
             first_seed: int = 0, eos_token_ids=(), log: Callable[[str], None] | None = None,
             backend=None) -> Runs:
    """Generate ``n_seeds`` times (seeds first_seed .. first_seed + n_seeds − 1) with rule
    ``name`` and record, per run, the first token and, per iteration, τ and its exact law.

    Args:
        name: a registered rule, or a planted one (``registry.planted()``: the engine runs
            its torch verifier with ``rule=`` its base).  K is forced to 1 for single-draft
            bases.
        log: called with a progress line every ``LOG_EVERY`` runs or ``LOG_SECONDS`` seconds,
            whichever comes first, and after the last.
        backend: the models' ``decoding.backend.Backend`` (None: torch).
    Raises:
        ValueError: unknown rule, or the engine's own errors.
    """
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine

    planted = registry.planted()
    if name in planted:
        from spectr_gbv.certify.planted import planted_verifier

        base, verifier = planted[name].base, planted_verifier(name)
    else:
        registry.spec(name)  # ValueError for an unknown name
        base, verifier = name, None
    K = 1 if registry.is_single_draft(base) else K
    engine = SpeculativeEngine(target, draft, rule=base, K=K, L=L, sampling=sampling,
                               draft_sampling=draft_sampling, verifier=verifier,
                               eos_token_ids=eos_token_ids, backend=backend)
    from spectr_gbv.certify.planted_laws import has_law, planted_tau_law

    ref = get_rule(base)
    runs = Runs(name, base, K, L)
    with_planted_law = name in planted and has_law(name)
    defects = () if name in planted else row_defects(name)
    for d in defects:
        runs.defect_laws.setdefault(d, [])
    last_line = time.perf_counter()
    for s in range(first_seed, first_seed + n_seeds):
        records = []
        t0 = time.perf_counter()
        result = engine.generate(prompt_ids, max_new_tokens, seed=s, on_iteration=records.append)
        t1 = time.perf_counter()
        runs.first_tokens.append(int(result.tokens[0]))
        for rec in records:
            runs.taus.append(int(rec.verdict.tau[0]))
            rows = rows_float64(rec)
            law = tau_law(ref, *rows)
            # a block capped at the tokens still needed has S < L positions: τ ≤ S
            runs.laws.append(np.pad(law, (0, L + 1 - len(law))))
            if with_planted_law:
                law = planted_tau_law(name, *rows)
                runs.planted_laws.append(np.pad(law, (0, L + 1 - len(law))))
            for d in defects:  # what the row's test would face if the verifier had defect d
                law = planted_tau_law(d, *rows)
                runs.defect_laws[d].append(np.pad(law, (0, L + 1 - len(law))))
        runs.generate_s += t1 - t0
        runs.law_s += time.perf_counter() - t1
        done = s - first_seed + 1
        if log is not None and (done % LOG_EVERY == 0 or done == n_seeds
                                or time.perf_counter() - last_line >= LOG_SECONDS):
            last_line = time.perf_counter()
            log(f"{name}: {done}/{n_seeds} runs, {len(runs.taus)} iterations "
                f"({runs.generate_s:.0f} s generating, {runs.law_s:.0f} s exact laws)")
    return runs


def extend_runs(runs: Runs, more: Runs) -> Runs:
    """``runs`` with ``more`` (the same rule, later seeds) appended."""
    runs.first_tokens += more.first_tokens
    runs.taus += more.taus
    runs.laws += more.laws
    runs.planted_laws += more.planted_laws
    for d, laws in more.defect_laws.items():
        runs.defect_laws.setdefault(d, []).extend(laws)
    runs.generate_s += more.generate_s
    runs.law_s += more.law_s
    return runs
