"""The batched-verifier tests' case generators and comparators (module doc of
tests/gpu_backend/verifiers/test_verifiers_cases.py: cases, row styles, ties)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spectr_gbv.reference.randomness import MatchedSource
from spectr_gbv.reference.rules import RULES, registry
from spectr_gbv.reference.rules.gbv import GreedyBlockVerification as RefGBV
from spectr_gbv.reference.rules.spectr_gbv import SpecTrGBV as RefSpecTrGBV

STYLES = ("random", "equal", "disjoint", "onehot", "tiny", "close")
PEAKED_STYLES = ("peaked", "equal", "disjoint", "onehot", "close")

# (registry name, parameters) of every rule variant of the generic torch-vs-reference tests: the
# specs' ``test_variants`` (the merged-tree rules have none: test_verifiers_matched.py TREE_RULES)
RULE_VARIANTS = tuple((s.name, params) for s in registry.specs() for params in s.test_variants)
SINGLE_DRAFT = registry.names(single_draft=True)


def variant_id(name: str, params: dict) -> str:
    return name + "".join(f"-{k}={v}" for k, v in params.items())


def reference_rule(name: str, params: dict):
    """The reference rule with the same parameters as get_verifier(name, **params)."""
    if name == "gbv" and params:
        return RefGBV(**params)
    if name == "spectr_gbv" and params:
        return RefSpecTrGBV(residual=params.get("residual", "released"),
                            algorithm2=params.get("algorithm2", False))
    return RULES[name]


def _dyadic(rng, V):
    counts = rng.multinomial(1024, rng.dirichlet(np.ones(V)))
    return counts / 1024.0


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def node_rows(rng, V: int, style: str) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) rows of one tree node in the given style (float64, each summing to 1)."""
    s = rng.uniform(0.3, 3.0)
    if style == "random":
        return _softmax(rng.normal(size=V) * s), _softmax(rng.normal(size=V) * s)
    if style == "equal":
        p = _dyadic(rng, V)
        return p, p.copy()
    if style == "disjoint" and V >= 2:
        mask = rng.random(V) < 0.5
        if mask.all() or not mask.any():
            mask[0], mask[1] = True, False
        p = np.where(mask, rng.random(V) + 0.05, 0.0)
        q = np.where(~mask, rng.random(V) + 0.05, 0.0)
        return p / p.sum(), q / q.sum()
    if style == "onehot" or style == "disjoint":
        p, q = np.zeros(V), np.zeros(V)
        p[rng.integers(V)] = 1.0
        q[rng.integers(V)] = 1.0
        r = rng.integers(3)
        if r == 1:
            q = _softmax(rng.normal(size=V) * s)
        if r == 2:
            p = _softmax(rng.normal(size=V) * s)
        return p, q
    if style == "tiny":
        p, q = _softmax(rng.normal(size=V) * s), _softmax(rng.normal(size=V) * s)
        for r in (p, q):
            idx = rng.random(V) < 0.4
            r[idx] = 10.0 ** rng.uniform(-14, -9, size=int(idx.sum()))
        return p / p.sum(), q / q.sum()
    if style == "peaked":  # a few tokens hold most of the mass, also at V = 4096
        return _softmax(rng.normal(size=V) * 8.0), _softmax(rng.normal(size=V) * 8.0)
    if style == "close":
        p = _softmax(rng.normal(size=V) * s)
        q = p * np.exp(rng.normal(size=V) * 0.1)
        return p, q / q.sum()
    raise ValueError(style)


def kseq_well_conditioned(p: np.ndarray, q: np.ndarray) -> bool:
    """ρ* of (p, q) is well conditioned for k ≤ 3 (module doc)."""
    tv = np.maximum(p - q, 0).sum()
    beta = np.minimum(p, q).sum()
    if not (beta == 0 or beta >= 1e-3):
        return False
    if tv == 0:
        return p.sum() == 1.0 and q.sum() == 1.0
    return tv >= 1e-2


def tree_case(rng, V: int, K: int, L: int, styles=STYLES, kseq_safe: bool = False,
              distinct_below_root: bool = False, min_draft_joint: float = 0.0,
              favour_smallest: float = 0.3):
    """One case (tokens [K, L], dp [K, L, V], tp [K, L+1, V]) on a random draft tree.

    Args:
        kseq_safe: every node's rows pass ``kseq_well_conditioned``.
        distinct_below_root: no p = q rows at the sub-block nodes, depth 1..L-1 (SpecTr-GBV tie,
            module doc).
        min_draft_joint: every sub-block's draft joint p(X^(k)_≤i) is at least this (cases are
            redrawn until it holds).
        favour_smallest: probability of drafting the least likely token instead of sampling.
    """
    for _ in range(1000):
        case = _tree_case(rng, V, K, L, styles, kseq_safe, distinct_below_root, favour_smallest)
        joints = np.cumprod(np.take_along_axis(case[1], case[0][:, :, None], axis=2)[:, :, 0], axis=1)
        if joints.min() >= min_draft_joint:
            return case
    raise RuntimeError("tree_case: no case met min_draft_joint in 1000 draws")


def _tree_case(rng, V, K, L, styles, kseq_safe, distinct_below_root, favour_smallest):
    nodes: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def rows(prefix):
        if prefix not in nodes:
            while True:
                pq = node_rows(rng, V, styles[rng.integers(len(styles))])
                if kseq_safe and not kseq_well_conditioned(*pq):
                    continue
                if distinct_below_root and 1 <= len(prefix) < L and np.array_equal(*pq):
                    continue
                break
            nodes[prefix] = pq
        return nodes[prefix]

    tokens = np.zeros((K, L), np.int64)
    dp = np.zeros((K, L, V))
    tp = np.zeros((K, L + 1, V))
    for k in range(K):
        prefix: tuple = ()
        for i in range(L):
            p, q = rows(prefix)
            if rng.random() < favour_smallest:
                pos = np.flatnonzero(p > 0)
                x = int(pos[np.argmin(p[pos])])
            else:
                x = int(rng.choice(V, p=p))
            tokens[k, i], dp[k, i], tp[k, i] = x, p, q
            prefix = prefix + (x,)
        tp[k, L] = rows(prefix)[1]
    return tokens, dp, tp


def case_options(name: str, V: int) -> dict:
    """The tie exclusions (module doc) that apply to a rule, and its row styles."""
    if name.startswith("spectr_gbv"):
        return {"distinct_below_root": True, "min_draft_joint": 1e-6, "favour_smallest": 0.0,
                "styles": PEAKED_STYLES if V > 6 else STYLES}
    return {"kseq_safe": name in ("spectr", "kseq_gbv")}


def stack_cases(cases, dtype=torch.float64):
    tok = torch.tensor(np.stack([c[0] for c in cases]))
    dp = torch.tensor(np.stack([c[1] for c in cases])).to(dtype)
    tp = torch.tensor(np.stack([c[2] for c in cases])).to(dtype)
    return tok, dp, tp


def random_noise(rng, B: int, K: int, L: int, V: int):
    """Uniforms in (0, 1] and exponentials > 0, float64 numpy."""
    U = 1.0 - rng.random((B, K, L + 1))
    E = np.maximum(rng.standard_exponential((B, V)), 1e-300)
    return U, E


def verdict_mismatch(verdict, b: int, ref, rtol: float = 1e-9) -> str | None:
    """Why row b of a BatchVerdict differs from a reference Verdict (None if identical).

    Compares τ, selected, the emitted tokens (and the -1 padding), num_emitted, and the
    modification: kind, K, ρ and the joints of the emitted tokens to ``rtol`` (relative).
    """
    L1 = verdict.tokens.shape[1]
    tau, sel = int(verdict.tau[b]), int(verdict.selected[b])
    toks = verdict.tokens[b].tolist()
    if (tau, sel) != (ref.tau, ref.selected):
        return f"tau/selected {(tau, sel)} != reference {(ref.tau, ref.selected)}"
    if tuple(toks[: tau + 1]) != ref.tokens or any(t != -1 for t in toks[tau + 1:]) or len(toks) != L1:
        return f"tokens {toks} != reference {ref.tokens}"
    if int(verdict.num_emitted[b]) != len(ref.tokens):
        return f"num_emitted {int(verdict.num_emitted[b])} != {len(ref.tokens)}"
    mod, rmod = verdict.modification, ref.modification
    if rmod is None:
        if mod is not None and bool(mod.active[b]):
            return "modification active where the reference has none"
        return None
    if mod is None or not bool(mod.active[b]):
        return "modification missing"
    if (mod.kind, mod.K) != (rmod.kind, rmod.K):
        return f"modification kind/K {(mod.kind, mod.K)} != {(rmod.kind, rmod.K)}"
    for what, mine, theirs in (("rho", float(mod.rho[b]), rmod.rho),
                               ("q_joint", float(np.exp(float(mod.log_q_joint[b]))), rmod.q_joint),
                               ("p_joint", float(np.exp(float(mod.log_p_joint[b]))), rmod.p_joint)):
        if not abs(mine - theirs) <= rtol * abs(theirs):
            return f"modification {what} {mine!r} != reference {theirs!r}"
    return None


def run_matched(verifier, rule, cases, U, E, dtype=torch.float64):
    """Run the verifier on the batch and the reference per row with the same noise.

    Returns:
        (BatchVerdict, list of reference Verdicts).
    """
    tok, dp, tp = stack_cases(cases, dtype)
    verdict = verifier(tok, dp, tp, noise=(torch.tensor(U), torch.tensor(E)))
    refs = [rule.verify(*case, MatchedSource(U[b], E[b])) for b, case in enumerate(cases)]
    return verdict, refs


class MarginSource(MatchedSource):
    """MatchedSource that records how close the reference's decisions were to a tie: the
    smallest |u − h| over the coins asked and the smallest gap between the two best race
    scores (log w − log E)."""

    def __init__(self, uniforms, exponentials):
        super().__init__(uniforms, exponentials)
        self.margin = np.inf

    def coin(self, h, key=(0, 0)):
        hc = min(1.0, max(0.0, float(h)))
        if 0.0 < hc < 1.0:  # h = 0 and h = 1 decide the same way at any precision
            self.margin = min(self.margin, abs(self.uniforms[key] - hc))
        return super().coin(h, key)

    def draw(self, weights):
        w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
        with np.errstate(divide="ignore"):
            score = np.where(w > 0, np.log(w) - np.log(self.exponentials), -np.inf)
        top = np.sort(score[np.isfinite(score)])
        if top.size >= 2:
            self.margin = min(self.margin, top[-1] - top[-2])
        return super().draw(weights)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Run each test on one intra-op thread (restored afterwards).  This 2-core machine is shared
    with other jobs; there, OpenMP's second thread makes small ops ~10x slower (measured:
    6 ms vs 63 ms for the same [16384, 9] ρ* edge evaluation)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
