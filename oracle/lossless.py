"""Losslessness without a reference rule: ``certify_lossless``.

``oracle.harness.certify_verifier`` compares a verifier with the exact law of a registered rule.
A new rule that no registry knows (say: accept the draft iff it equals a fresh target draw, else
emit that draw) has no such law to be compared with, but it has the one property every lossless
rule shares: the tokens it emits follow the target model.  ``certify_lossless`` checks that
property, and one consequence of it, directly:

    from spectr_gbv.oracle.lossless import certify_lossless   # also oracle.harness
    report = certify_lossless(my_verifier, K=1, L=3)
    assert report.ok, report.table()

For each (draft, target) pair of toy models (built in: ``oracle.lossless_pairs.default_pairs``,
each documented with what it sees; or the caller's), the harness decodes
``n_samples`` independent generations the way a serving engine does: at every call it draws K
fresh i.i.d. draft blocks of L tokens from the draft model after the current prefix, hands the
verifier their rows (``reference.decode.Decoder.block_inputs``: the batched contract of
reference/contract.py, numpy arrays, per-row seeds hashed per (seed, pair, call, row):
``oracle.seeding.CaseSeeds.row_seeds``), appends
the τ + 1 emitted tokens and continues from the new prefix until at least L + 1 tokens are out.
A pair runs at L_pair = min(L, its ``max_L``) (the V = 64 pair at L = 1; the V = 2 "deep" and
"toy" pairs up to ``ENGINE_MAX_L`` = 8, the largest L the engine's automatic configuration
chooses) and only when K ≥ its ``min_K``; its result records L_pair and its notes say when it
is below the L asked.  Then, each test at α/m (Bonferroni over the m = 3 + L_pair tests of the
pair, so a lossless verifier fails a pair with probability ≤ α):

1. first token: the law of the first emitted token against the target's q(· | ()) (G-test,
   ``oracle.gtest.gtest``);
2. joint: the law of the first L + 1 emitted tokens against the target's exact law of
   sequences (V^(L+1) cells; small cells are pooled, the pooled mass is reported and included
   in δ, as ``oracle.certify.CaseResult`` does);
3. acceptance ceiling: mean τ of the first call (root context, fresh drafts) against the most
   any lossless K-draft rule can accept there — the global block optimal transport
   (``oracle.programs.global_ot``, docs/bounds.md §4.3) where its LP is small enough
   (≤ ``OT_MAX_VARIABLES`` variables), else the prefix-match ceiling U
   (``oracle.prefix_match.prefix_match_bound``, docs/bounds.md §6, which is ≥ the OT; at K = 1
   both equal B(1, L)).  If the lower end of the one-sided (1 − α/m) interval of E[τ]
   (``oracle.mean_tests.mean_ci``, normal approximation) is above the ceiling, the verifier accepts
   more than a lossless rule can: a proof of loss on its own, whatever the law tests say;
4. positions d = 1..L_pair ("position d", ``_position_test``): the law of the d-th emitted token
   (0-based) given the d tokens before it, against q(· | prefix): one G-test per eligible prefix
   (expected count ≥ ``MIN_KEY_EXPECTED``), their G and degrees of freedom summed.  The joint
   law has V^(L+1) cells (512 at V = 2, L = 8), most pooled at depth; the per-position tests
   keep power where a defect sits at one depth (δ stated per position).

Drafting.  The K blocks of a call are i.i.d. (``drafting="iid"``, the only value accepted): what
engines with K independent drafts send, and what the acceptance ceiling assumes.  A rule
written for drafts drawn without replacement or for draft trees is lossless only under its own
drafting; ``certify_lossless`` refuses any other ``drafting`` with a ValueError saying so
instead of certifying it under the wrong law (such a rule run on i.i.d. drafts fails the
"multi" pair: tests/oracle/test_lossless_pairs.py).

Each result states N, α, α/m, the p-values, the detectable δ of the two G-tests (the smallest
total-variation deviation of the tested law detected with power 0.99, pooled mass included:
``GTestResult.detectable_tv_law``), the detectable excess of E[τ] over the ceiling (power 0.99),
and which tests failed.

Carried modifications.  Rules that modify later targets (GBV, K-SEQ-GBV: SpecTr-GBV Algorithm 2,
docs/rules.md §3) are lossless only together with the modified targets of their later calls.
When a verdict returns a record (``BatchVerdict.modification``, a ``BatchModification``: kind,
K, ρ and the log joints of the emitted tokens, per row), the harness carries it exactly as the
reference decode loop does: the generation moves to the state that
``reference.decode.Decoder.advance`` returns (the record's window pushed, older windows continued
over the emitted tokens, windows whose positions are all emitted dropped), and its next calls
get that state's effective target rows (``Decoder.block_inputs``: modified at the positions a
live window covers, plain elsewhere) in place of the plain target's.
Drafts are unaffected (the draft model is never modified).  A verifier that returns no record
(``modification`` None, or no row ``active``) stays memoryless: every call gets the plain
target's rows for its context, from tables precomputed per context; only the rows of
generations with a live window are computed per (state, draft block) and memoised.  With a
narrow dtype the windows are those of the rounded rows renormalised (what the verifier saw),
and the modified rows are rounded again.  ``modification_rows`` counts the rows that returned
an active record, ``carried_rows`` the rows handed a modified target, and the notes say which.
A verifier that needs a record it does not return is certified as the memoryless rule it then
is: GBV with its record dropped fails the joint test (the planted check of
tests/oracle/test_certify_lossless.py).

Pairs at a real vocabulary.  A ``VocabPair`` (oracle/lossless_pairs.py: "vocab" at V = 151,936,
"vocab-32k" at V = 32,768) cannot enumerate blocks or a joint law; its rows are one draft row and
one target row after every prefix, and each of its min(N, ``samples_cap`` = 5,000) samples is
one first call with K drafts of one token (L = 1).  Its four tests (``VOCAB_TESTS``, α/4 each)
are on the first emitted token's law over the V tokens — the G-test (most cells pooled: δ ≈ 0.5),
the coarsened G-test of oracle.coarsen (64 bins of equal exact mass by rank: δ 0.077), the
identity test of oracle.identity (δ on the whole law 0.22–0.30) — and the acceptance ceiling
Σ_x min(q(x), 1 − (1 − p(x))^K) (the prefix-match U at L = 1, which the global OT attains).
What only these pairs see: draws at a real vocabulary — a correction or bonus truncated to the
top k, a CDF accumulated in float16, a floor on the probability of an emitted token; each is
identical to the exact draw at V ≤ 64.  Records are not carried there (no later call).

Drafter and verifier as one system.  ``drafter=`` replaces the harness's own i.i.d. drafts by
the caller's drafter, called before each verifier call with the SAME row seeds the verifier then
gets — as a serving engine hands one per-request seed (or generator) to both:

    draft_tokens = drafter(next_draft_probs, K, L, *, seeds)       int [B, K, L]
        next_draft_probs(tokens int [B, K, i]) -> float [B, K, V]  (i = 0..L−1): the draft
            model's row after each row's context followed by tokens[b, k], as the verifier
            will be told it (rounded to the dtype)
        seeds  int64 [B]

The law of what comes out is then that of the drafter and the verifier together: a drafter whose
noise overlaps the verifier's (both drawing from default_rng(seed): the uniform that drew a draft
token is the coin that decides it) makes a lossless verifier lossy, which the law tests see
(tests/oracle/test_drafter.py), while each alone certifies.  The drafter must propose blocks of
positive draft probability (a block of probability 0, a token outside [0, V) or output of the
wrong shape is its pair's failed "verifier output" test).  Without a drafter the report names the
drafter among what it did not see (``LosslessReport.not_seen``).
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
from scipy import stats as scipy_stats

from spectr_gbv.oracle.input_probes import input_probes
from spectr_gbv.oracle.outcome import verdict_word
from spectr_gbv.oracle.certify import (renormalise_rows, counts_from_samples, empirical_tv, round_to_dtype,
                                       rows_per_call, worst_cells)
from spectr_gbv.oracle.coarsen import coarse_gtest
from spectr_gbv.oracle.identity import identity_test
from spectr_gbv.oracle.seed_contract import lossless_seed_checks, seed_table
from spectr_gbv.oracle.seeding import CaseSeeds
from spectr_gbv.oracle.prefix_match import prefix_match_bound
from spectr_gbv.oracle.defaults import DEFAULT_SAMPLES
from spectr_gbv.oracle.lossless_pairs import ENGINE_MAX_L, ToyPair, VocabPair, default_pairs
from spectr_gbv.oracle.gtest import gtest
from spectr_gbv.oracle.gtest_power import detectable_tv
from spectr_gbv.oracle.mean_tests import mean_ci
from spectr_gbv.reference.contract import MODIFICATION_KINDS, ContractViolation, to_numpy
from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.models import ToyModel
from spectr_gbv.reference.validation import check_positive_int
from spectr_gbv.reference.verdict import Modification, Verdict

__all__ = ["ToyPair", "VocabPair", "VOCAB_TESTS", "LosslessTest", "LosslessCaseResult", "LosslessReport", "certify_lossless",
           "default_pairs", "lossless_ceiling", "position_test_name", "OT_MAX_VARIABLES", "MAX_TABLE_BYTES",
           "MAX_JOINT_CELLS", "ENGINE_MAX_L", "DRAFTING", "MIN_KEY_EXPECTED"]

# The global OT's LP is solved when it has at most this many variables (C(n+K−1, K)·m for n draft
# and m target blocks of positive mass; about a second with HiGHS), else the prefix-match U.
OT_MAX_VARIABLES = 200_000
# Toy sizes only: the rows of every draft block after every context of ≤ L tokens
# (``_table_bytes``) and the cells of the joint law (V^(L+1)) must fit.
MAX_TABLE_BYTES = 2**30
MAX_JOINT_CELLS = 65_536
# HiGHS returns the OT within its feasibility tolerance 1e-9 (oracle.programs.LP_SOLVER_OPTS):
# the mean is compared with the ceiling plus this slack, so a rule at the optimum never fails on it.
CEILING_SLACK = 1e-7
# Power at which the detectable δ and the detectable excess are stated.
POWER = 0.99
DTYPES = ("float64", "float32", "bfloat16")
# The tests every pair runs; then one per position d = 1..L_pair (``position_test_name``).
TESTS = ("first token", "joint", "acceptance ceiling")
# The tests of a VocabPair (module doc, "Pairs at a real vocabulary"), each at α/4.
VOCAB_TESTS = ("first token", "first token, coarsened", "first token, identity", "acceptance ceiling")
# The only drafting the harness does: K i.i.d. blocks per call (module doc, "Drafting").
DRAFTING = ("iid",)
# A prefix enters a position test when its expected count N·q(prefix) reaches this (decided from
# the law and N, not from the counts: oracle.conditional_gtest.conditional_gtests' default 10 × 5).
MIN_KEY_EXPECTED = 50.0


def position_test_name(d: int) -> str:
    """The name of the test of the token at position d (0-based; d ≥ 1) given its prefix."""
    return f"position {d}"


# ------------------------------------------------------------------------------------ models


class _Rounded(ToyModel):
    """``base`` as a verifier receiving rows rounded to ``dtype`` sees it: each conditional
    rounded (``oracle.certify.round_to_dtype``) and renormalised in float64."""

    def __init__(self, base: ToyModel, dtype: str):
        self.base, self.dtype, self.vocab_size = base, dtype, base.vocab_size

    def _conditional(self, prefix):
        return renormalise_rows(round_to_dtype(self.base.conditional(prefix), self.dtype))


def _law_model(model: ToyModel, dtype: str) -> ToyModel:
    return model if dtype == "float64" else _Rounded(model, dtype)


# ------------------------------------------------------------------------------------ ceiling


@functools.lru_cache(maxsize=64)
def _ceiling_cached(p_bytes: bytes, q_bytes: bytes, shape: tuple, K: int) -> tuple[float, str]:
    p = np.frombuffer(p_bytes).reshape(shape)
    q = np.frombuffer(q_bytes).reshape(shape)
    L = len(shape)
    U = float(prefix_match_bound(p, q, K).sum())
    if K == 1:
        return U, "global OT = prefix-match U = B(1, L) (K = 1; docs/bounds.md §6)"
    n, m = int(np.count_nonzero(p)), int(np.count_nonzero(q))
    size = math.comb(n + K - 1, K) * m
    if size <= OT_MAX_VARIABLES:
        from spectr_gbv.oracle.programs import global_ot

        res = global_ot(p, q, K, return_coupling=False)
        if res.status == "optimal" and math.isfinite(res.optimum):
            return float(res.optimum), f"global OT ({size:,} LP variables; docs/bounds.md §4.3)"
        why = f"the global OT's LP ended '{res.status}'"
    else:
        why = f"the global OT's LP would have {size:,} variables > {OT_MAX_VARIABLES:,}"
    return U, f"prefix-match U (docs/bounds.md §6; ≥ the global OT, not computed: {why}; L = {L})"


def lossless_ceiling(draft: ToyModel, target: ToyModel, K: int, L: int) -> tuple[float, str]:
    """The most E[τ] any lossless K-draft rule reaches at the first call from the empty context.

    The global block optimal transport of the draft's and target's block laws of L tokens
    (``oracle.programs.global_ot``, docs/bounds.md §4.3: every lossless rule couples its K
    i.i.d. draft blocks with its first L emitted tokens, which follow the target, and accepts
    at most their longest common prefix), solved when its LP has ≤ ``OT_MAX_VARIABLES``
    variables; otherwise the prefix-match ceiling U(K, L) = Σ_i Σ_{|z|=i} min(q(z),
    1 − (1 − p(z))^K) (``oracle.prefix_match.prefix_match_bound``, docs/bounds.md §6), which is
    ≥ the OT and equal to it at K = 1 (both B(1, L)).  Cached per (block laws, K).

    Args:
        draft, target: ToyModels on one vocabulary.  K, L: integers ≥ 1.
    Returns:
        (ceiling float in accepted tokens per call, its name with its source).
    Raises:
        ValueError: K or L < 1, a vocabulary mismatch.
    """
    K, L = check_positive_int(K, "K"), check_positive_int(L, "L")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"models: vocabulary mismatch, draft V = {draft.vocab_size}, target V = {target.vocab_size}")
    p = np.ascontiguousarray(draft.block_law(L), dtype=np.float64)
    q = np.ascontiguousarray(target.block_law(L), dtype=np.float64)
    return _ceiling_cached(p.tobytes(), q.tobytes(), p.shape, K)


# ------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class LosslessTest:
    """One test of a pair.

    Attributes:
        name: "first token", "joint", "acceptance ceiling" or "position d" (d = 1..L).
        alpha: the level it ran at (α/m).  pvalue: its p-value.  passed: pvalue ≥ alpha.
        detectable: G-tests: δ, the smallest TV deviation of the tested law detected with power
            0.99, pooled mass included (``GTestResult.detectable_tv_law``); ceiling: the excess of
            E[τ] over the ceiling detected with power 0.99, (z_{1−α/m} + z_{0.99})·s/√N; position
            d: the smallest mean conditional TV of the d-th token given its prefix detected with
            power 0.99, ineligible prefixes and pooled mass included (``_position_test``).
        statistic: G, or the z of (mean τ − ceiling).
        cells: cells compared after pooling (G-tests; 0 for the ceiling).
        pooled_mass: law mass of the pooled cells (G-tests).
        detectable_pooled: δ on the pooled cells only (G-tests; NaN for the ceiling).
        empirical_tv: ½ Σ |O/N − p| over the cells (G-tests; biased up by noise, ≈ √(cells/N)).
        worst_cells: up to 3 (cell, observed, expected count), largest |O − E|/√E first.
        summary: one line.
    """

    name: str
    alpha: float
    pvalue: float
    passed: bool
    detectable: float
    statistic: float
    cells: int = 0
    pooled_mass: float = 0.0
    detectable_pooled: float = math.nan
    empirical_tv: float = math.nan
    worst_cells: tuple = ()
    summary: str = ""


@dataclass
class LosslessCaseResult:
    """The outcome of one (draft, target) pair.

    Attributes:
        name, draft, target: the pair's label and the models' reprs.  V, K, dtype; L: the block
            length the pair ran at (min(L asked, its max_L)).
        n: N generations.  alpha: the pair's false-alarm rate; each test ran at alpha/len(tests).
        tests: the LosslessTest s: ``TESTS`` in order, then "position 1" .. "position L" (L the
            pair's, ``position_test_name``).
        mean_tau: mean τ of the first call.  mean_tau_low: the lower end of its one-sided
            (1 − α/m) interval.  ceiling, ceiling_name: the lossless ceiling and which one.
        calls, rows: verifier calls and rows (all iterations).  modification_rows: rows whose
            verdict returned an active Algorithm 2 record (τ < L; carried: module doc).
        carried_rows: rows handed the modified target of a live window instead of the plain
            target's (0 for a verifier that returns no record: memoryless).
        seconds: wall time of the pair.  notes: what the reader should know.
    """

    name: str
    draft: str
    target: str
    V: int
    K: int
    L: int
    dtype: str
    n: int
    alpha: float
    tests: tuple
    mean_tau: float
    mean_tau_low: float
    ceiling: float
    ceiling_name: str
    calls: int
    rows: int
    modification_rows: int
    carried_rows: int
    seconds: float
    notes: str = ""

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.tests)

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the failed tests."""
        return tuple(t.name for t in self.tests if not t.passed)

    @property
    def verdict(self) -> str:
        return verdict_word(self.passed)

    def test(self, name: str) -> LosslessTest:
        """The test named ``name`` (``TESTS``).  Raises KeyError when it did not run."""
        for t in self.tests:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass
class LosslessReport:
    """Every pair's result, the seed-contract checks (``oracle.seed_contract.SeedCheck``: "seed
    replay", "seed dependence", "batch independence"), the input probes
    (``oracle.input_probes.Probe``; empty when not run) and ``not_seen`` (one line per thing the
    run did not look at: ``certify_lossless``'s doc); ``ok`` when every pair passed every test and
    every check and probe passed."""

    results: list = field(default_factory=list)
    seed_checks: list = field(default_factory=list)
    probes: list = field(default_factory=list)
    not_seen: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (all(r.passed for r in self.results) and all(c.passed for c in self.seed_checks)
                and all(p.passed for p in self.probes))

    @property
    def failed(self) -> dict[str, tuple[str, ...]]:
        """pair name → the tests it failed (pairs that passed are left out), "seed contract" →
        the seed checks that failed, and "input probes" → the probes that failed, if any."""
        out = {r.name: r.failed for r in self.results if not r.passed}
        bad = tuple(c.name for c in self.seed_checks if not c.passed)
        if bad:
            out["seed contract"] = bad
        bad = tuple(p.name for p in self.probes if not p.passed)
        if bad:
            out["input probes"] = bad
        return out

    def to_json(self) -> list[dict]:
        rows = []
        for r in self.results:
            d = asdict(r)
            d["verdict"], d["failed"] = r.verdict, list(r.failed)
            d["tests"] = []
            for t in r.tests:
                td = asdict(t)
                td["worst_cells"] = [{"cell": repr(c), "observed": o, "expected": e} for c, o, e in t.worst_cells]
                d["tests"].append(td)
            rows.append(d)
        return (rows + [c.to_json() for c in self.seed_checks]
                + [{"probe": p.name, "kind": "input probe", "passed": p.passed, "detail": p.detail,
                    "verdict": verdict_word(p.passed)} for p in self.probes])

    def table(self) -> str:
        """A fixed-width table (markdown-compatible), one row per (pair, test); then the seed
        checks' (``oracle.seed_contract.seed_table``).  ``to_json`` lists the pairs, then the
        seed checks (their ``check`` key names them)."""
        lines = ["| pair | V | K | L | N | α (per test) | test | p | detectable | measured | verdict |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.results:
            for t in r.tests:
                if t.name == "acceptance ceiling":
                    measured = (f"mean τ {r.mean_tau:.4f} (low {r.mean_tau_low:.4f}) vs "
                                f"{r.ceiling:.4f} {r.ceiling_name.split(' (')[0]}")
                    det = f"excess {t.detectable:.4f}"
                else:
                    measured = f"TV {t.empirical_tv:.4f}, pooled mass {t.pooled_mass:.3g}"
                    det = f"δ {t.detectable:.4f}"
                lines.append(f"| {r.name} | {r.V} | {r.K} | {r.L} | {r.n} | {r.alpha:g} ({t.alpha:.3g}) | "
                             f"{t.name} | {t.pvalue:.3g} | {det} | {measured} | {'PASS' if t.passed else 'FAIL'} |")
        stopped = [f"- {r.name}: {t.summary}" for r in self.results for t in r.tests if t.name == VERIFIER_OUTPUT]
        if stopped:
            lines += ["", "Stopped pairs:"] + stopped
        if self.seed_checks:
            lines += ["", seed_table(self.seed_checks)]
        if self.probes:
            lines += ["", "| input probe | verdict | detail |", "|---|---|---|"]
            lines += [f"| {p.name} | {verdict_word(p.passed)} | {p.detail} |" for p in self.probes]
        lines += [f"not seen: {note}" for note in self.not_seen]
        return "\n".join(lines)


# ------------------------------------------------------------------------------------ sampling


class _PrefixTables:
    """Per context c (a prefix of emitted tokens): every draft block of L tokens with positive
    probability, its probability under the draft as the verifier is told it, and the verifier's
    rows for it (``Decoder.block_inputs`` on the plain models, no live modification window),
    rounded to the dtype.  Tables are built on first use and concatenated, so a batch gathers
    its rows by global block index.  Rows under a carried modification are ``_Carrier``'s."""

    def __init__(self, pair: ToyPair, L: int, dtype: str):
        self.dec = Decoder(pair.draft, pair.target, 1, L)
        self.law_draft, self.law_target = _law_model(pair.draft, dtype), _law_model(pair.target, dtype)
        self.L, self.V, self.dtype = L, pair.V, dtype
        self.offset: dict[tuple, tuple[int, np.ndarray]] = {}
        self.parts: list = []
        self.arrays = None
        self.lookup: dict[tuple, dict] = {}
        self.part_of: dict[tuple, int] = {}

    def _positive_blocks(self, c: tuple) -> list[tuple]:
        """The draft blocks of L tokens after ``c`` whose every token has positive probability
        under the draft as the verifier sees it, in lexicographic order (the order of
        ``itertools.product``, so the tables and the draws are those of enumerating every block
        and dropping the blocks of probability 0; a one-hot draft has one block per context)."""
        blocks = [()]
        for _ in range(self.L):
            blocks = [z + (int(x),) for z in blocks for x in np.flatnonzero(self.law_draft.conditional(c + z) > 0)]
        return blocks

    def _block_inputs(self, c: tuple, blocks: list[tuple]):
        """``Decoder.block_inputs(DecodeState(c), blocks)`` of the plain models (no modification
        window: the rows after c + z[:i] are the models' conditionals), computed once per
        distinct prefix z[:i] of the blocks and gathered: (tokens int64 [n, L], draft rows
        float64 [n, L, V], target rows [n, L+1, V])."""
        tokens = np.array(blocks, dtype=np.int64).reshape(len(blocks), self.L)
        dp = np.empty((len(blocks), self.L, self.V))
        tp = np.empty((len(blocks), self.L + 1, self.V))
        for i in range(self.L + 1):
            heads, inverse = np.unique(tokens[:, :i], axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            contexts = [c + tuple(h) for h in heads.tolist()]
            tp[:, i] = np.stack([self.dec.target.conditional(z) for z in contexts])[inverse]
            if i < self.L:
                dp[:, i] = np.stack([self.dec.draft.conditional(z) for z in contexts])[inverse]
        return tokens, dp, tp

    def context(self, c: tuple) -> tuple[int, np.ndarray]:
        """(global offset, block probabilities) of context ``c``, building its table."""
        hit = self.offset.get(c)
        if hit is not None:
            return hit
        tokens, dp, tp = self._block_inputs(c, self._positive_blocks(c))
        dp, tp = round_to_dtype(dp, self.dtype), round_to_dtype(tp, self.dtype)
        law_dp = dp if self.dtype == "float64" else renormalise_rows(dp)
        step = np.take_along_axis(law_dp, tokens[:, :, None], axis=2)[:, :, 0]
        prob = np.prod(step, axis=1)
        keep = prob > 0
        start = sum(len(p[0]) for p in self.parts)
        self.part_of[c] = len(self.parts)
        self.parts.append((tokens[keep], dp[keep], tp[keep]))
        self.arrays = None
        hit = self.offset[c] = (start, prob[keep] / prob[keep].sum())
        return hit

    def gather(self, index: np.ndarray):
        """(draft_tokens, draft_probs, target_probs) of the global block indices ``index`` [...]
        (copies)."""
        if self.arrays is None:
            self.arrays = tuple(np.concatenate([p[j] for p in self.parts]) for j in range(3))
        return tuple(a[index] for a in self.arrays)

    def block_tokens(self, index: int) -> np.ndarray:
        """The L tokens of global block ``index``."""
        self.gather(np.zeros(0, dtype=np.int64))
        return self.arrays[0][index]

    def block_index(self, c: tuple, block: tuple) -> int:
        """The global index of ``block`` (L tokens of positive draft probability) after context
        ``c``.

        Raises:
            ContractViolation: a block of draft probability 0 (a drafter's defect).
        """
        start, _ = self.context(c)
        lookup = self.lookup.get(c)
        if lookup is None:
            part = self.parts[self.part_of[c]]
            lookup = self.lookup[c] = {tuple(z): start + j for j, z in enumerate(part[0].tolist())}
        hit = lookup.get(tuple(int(t) for t in block))
        if hit is None:
            raise ContractViolation(f"the drafter proposed the block {list(block)} after {list(c)}, of draft "
                                    "probability 0 under the draft model it was handed")
        return hit

    def draft_rows(self, contexts: list, tokens: np.ndarray) -> np.ndarray:
        """float [B, K, V]: the draft rows, as the verifier is told them (rounded to the dtype),
        after each row's context followed by ``tokens`` [B, K, i] (i < L)."""
        tokens = np.asarray(tokens)
        out = np.empty(tokens.shape[:2] + (self.V,))
        for b, c in enumerate(contexts):
            for k in range(tokens.shape[1]):
                out[b, k] = round_to_dtype(self.dec.draft.conditional(c + tuple(int(t) for t in tokens[b, k])),
                                           self.dtype)
        return out


@functools.lru_cache(maxsize=16)
def _tables(pair: ToyPair, L: int, dtype: str) -> _PrefixTables:
    return _PrefixTables(pair, L, dtype)


def _check_output(out, drafts: np.ndarray, L: int, V: int) -> tuple[np.ndarray, np.ndarray, list]:
    """(τ int64 [B], tokens int64 [B, L+1], row b's Algorithm 2 record or None: ``_records``)
    of one call.

    Raises:
        ContractViolation: τ or tokens of the wrong shape, τ outside [0, L], an emitted token id outside
            [0, V), ``selected`` outside [0, K) where τ > 0, accepted tokens that are not the
            first τ tokens of the selected draft block; a malformed modification record
            (``_records``).
    """
    B, K = drafts.shape[:2]
    try:
        tau = np.asarray(to_numpy(out.tau)).astype(np.int64, casting="unsafe")
        tokens = np.asarray(to_numpy(out.tokens)).astype(np.int64, casting="unsafe")
    except AttributeError as err:
        raise ContractViolation(f"verifier output has no tau/tokens (the batched contract's BatchVerdict): {err}") from None
    if tau.shape != (B,):
        raise ContractViolation(f"verifier returned tau of shape {tau.shape}, expected [B] = [{B}]")
    if tokens.shape != (B, L + 1):
        raise ContractViolation(f"verifier returned tokens of shape {tokens.shape}, expected [B, L+1] = [{B}, {L + 1}]")
    if np.any((tau < 0) | (tau > L)):
        bad = int(np.flatnonzero((tau < 0) | (tau > L))[0])
        raise ContractViolation(f"verifier returned tau = {int(tau[bad])} outside [0, {L}] (batch row {bad})")
    emitted = np.arange(L + 1)[None, :] <= tau[:, None]
    if np.any(emitted & ((tokens < 0) | (tokens >= V))):
        bad = int(np.flatnonzero((emitted & ((tokens < 0) | (tokens >= V))).any(1))[0])
        raise ContractViolation(f"verifier emitted a token id outside [0, {V}) (batch row {bad}: "
                         f"tau {int(tau[bad])}, tokens {tokens[bad].tolist()})")
    accepted = np.arange(L)[None, :] < tau[:, None]
    selected = getattr(out, "selected", None)
    rows = np.arange(B)
    if selected is None:  # no selected draft given: any draft must carry the accepted prefix
        ok = ((drafts == tokens[:, None, :L]) | ~accepted[:, None, :]).all(2).any(1)
    else:
        sel = np.asarray(to_numpy(selected)).astype(np.int64, casting="unsafe").reshape(-1)
        if sel.shape != (B,):
            raise ContractViolation(f"verifier returned selected of shape {sel.shape}, expected [B] = [{B}]")
        bad_sel = (tau > 0) & ((sel < 0) | (sel >= K))
        if bad_sel.any():
            bad = int(np.flatnonzero(bad_sel)[0])
            raise ContractViolation(f"verifier returned selected = {int(sel[bad])} outside [0, {K}) with "
                             f"tau = {int(tau[bad])} > 0 (batch row {bad})")
        ok = ((drafts[rows, np.clip(sel, 0, K - 1)] == tokens[:, :L]) | ~accepted).all(1)
    if not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        raise ContractViolation(f"verifier's accepted tokens {tokens[bad, :int(tau[bad])].tolist()} are not the first "
                         f"tau = {int(tau[bad])} tokens of the selected draft block (batch row {bad}: drafts "
                         f"{drafts[bad].tolist()})")
    return tau, tokens, _records(getattr(out, "modification", None), tau, B, L)


def _records(mod, tau: np.ndarray, B: int, L: int) -> list:
    """Row b's Algorithm 2 record of one call as a hashable (kind, K, ρ, log q joint, log p
    joint), or None where the row opened no window (no record, ``active`` False, or τ = L).

    Raises:
        ContractViolation: a record with an unknown kind, fields of the wrong shape, or an active row
            whose ρ is negative or not finite or whose log joints are NaN or +inf.
    """
    if mod is None:
        return [None] * B
    kind = getattr(mod, "kind", None)
    if kind not in MODIFICATION_KINDS:
        raise ContractViolation(f"verifier returned a modification of kind {kind!r}; the batched contract's "
                         f"BatchModification has kind {' or '.join(map(repr, MODIFICATION_KINDS))}")
    try:
        fields = {name: np.asarray(to_numpy(getattr(mod, name)))
                  for name in ("rho", "log_q_joint", "log_p_joint", "active")}
        mod_K = int(mod.K)
    except (AttributeError, TypeError) as err:
        raise ContractViolation(f"verifier's modification is not a BatchModification (reference/contract.py): {err}") from None
    for name, a in fields.items():
        if a.shape != (B,):
            raise ContractViolation(f"verifier returned modification.{name} of shape {a.shape}, expected [B] = [{B}]")
    active = fields["active"].astype(bool) & (tau < L)
    rho = fields["rho"].astype(np.float64)
    lq, lp = fields["log_q_joint"].astype(np.float64), fields["log_p_joint"].astype(np.float64)
    bad = active & ~(np.isfinite(rho) & (rho >= 0) & ~np.isnan(lq) & ~np.isnan(lp) & (lq < np.inf) & (lp < np.inf))
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ContractViolation(f"verifier returned an active modification record with rho = {rho[b]}, log joints "
                         f"({lq[b]}, {lp[b]}) (batch row {b}): rho must be finite and >= 0, the log joints "
                         "< +inf and not NaN")
    return [(kind, mod_K, float(rho[b]), float(lq[b]), float(lp[b])) if active[b] else None for b in range(B)]


class _Carrier:
    """Algorithm 2's modified targets across the calls of one ``_decode`` (module doc,
    "Carried modifications"): the reference decode loop's windows (``reference.decode.Decoder``,
    ``DecodeState``, ``Decoder.advance``) over the models as the verifier sees them (the
    dtype's rounded rows, renormalised), one per ``_decode`` so that nothing of a verifier
    outlives its run.

    States with a live window are numbered (state ids ≥ 0; -1 is "no live window": the plain
    target, whose rows are the tables').  Rows are computed once per (state, draft block), the
    next state once per (state, emitted tokens, record).
    """

    def __init__(self, tables: "_PrefixTables"):
        self.tables = tables
        self.dec = Decoder(tables.law_draft, tables.law_target, 1, tables.L)
        self.ids: dict[tuple, int] = {}
        self.states: list[DecodeState] = []
        self.rows: dict[tuple[int, int], np.ndarray] = {}
        self.next: dict[tuple, int] = {}

    def target_rows(self, sid: int, block: int) -> np.ndarray:
        """The effective target rows [L+1, V] of global draft block ``block`` in state ``sid``,
        rounded to the dtype (``Decoder.block_inputs``' target_probs)."""
        hit = self.rows.get((sid, block))
        if hit is None:
            z = tuple(int(t) for t in self.tables.block_tokens(block))
            _, _, tp = self.dec.block_inputs(self.states[sid], [z])
            hit = self.rows[(sid, block)] = round_to_dtype(tp[0], self.tables.dtype)
        return hit

    def advance(self, sid: int, context: tuple, emitted: tuple, record) -> int:
        """``Decoder.advance`` from state ``sid`` (-1: no live window after ``context``) over
        ``emitted``, the record's window pushed: the new state's id, -1 when no window is live."""
        key = (sid, emitted, record) if sid >= 0 else (sid, context, emitted, record)
        hit = self.next.get(key)
        if hit is None:
            state = self.states[sid] if sid >= 0 else DecodeState(context)
            mod = None
            if record is not None:
                kind, K, rho, lq, lp = record
                mod = Modification(kind, K, rho, math.exp(lq), math.exp(lp))
            new = self.dec.advance(state, Verdict(len(emitted) - 1, -1, emitted, mod))
            hit = -1
            if new.windows:
                hit = self.ids.get(new.key(), -1)
                if hit < 0:
                    hit = self.ids[new.key()] = len(self.states)
                    self.states.append(new)
            self.next[key] = hit
        return hit


def _decode(verifier, tables: _PrefixTables, K: int, N: int, chunk: int, seed: CaseSeeds, drafter=None):
    """N generations of ≥ L + 1 tokens (module doc), Algorithm 2 records carried.

    Drafts are drawn per context (the draft model is never modified), from the plain tables —
    or, with a ``drafter``, by it, per call, with the call's row seeds (module doc, "Drafter and
    verifier as one system"); a generation with a live modification window (a state of
    ``_Carrier``) gets the effective target rows of its state in place of the plain ones.  A
    verifier that returns no record never opens a window: every call then uses the plain tables
    only.

    Returns:
        (emitted int64 [N, L+1], τ of the first call int64 [N], calls, rows, rows that returned
        an active record, rows handed modified target rows).
    """
    L = tables.L
    V = tables.V
    rng = seed.draft_rng()
    out = np.full((N, 2 * L + 1), -1, dtype=np.int64)
    length = np.zeros(N, dtype=np.int64)
    carrier = _Carrier(tables)
    state = np.full(N, -1, dtype=np.int64)  # each generation's carrier state id, -1: no live window
    first_tau = None
    calls = rows = n_mod = n_carried = 0
    while True:
        live = np.flatnonzero(length < L + 1)
        if live.size == 0:
            break
        # group the live generations by context (their first L entries, -1 padded, name it)
        keys, inverse = np.unique(out[live, :L], axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        index = np.empty((live.size, K), dtype=np.int64)
        contexts = [tuple(int(t) for t in key if t >= 0) for key in keys]
        if drafter is None:
            for g, context in enumerate(contexts):
                members = np.flatnonzero(inverse == g)
                start, prob = tables.context(context)
                index[members] = start + rng.choice(prob.size, size=(members.size, K), p=prob)
        sid = state[live]
        taus = np.empty(live.size, dtype=np.int64)
        emitted = np.empty((live.size, L + 1), dtype=np.int64)
        records: list = [None] * live.size
        for lo in range(0, live.size, chunk):
            hi = min(lo + chunk, live.size)
            if drafter is not None:  # the caller's drafter, with the seeds the verifier then gets
                row_contexts = [contexts[g] for g in inverse[lo:hi]]
                drafted = _drafted(drafter, lambda t, cs=row_contexts: tables.draft_rows(cs, t), K, L, V,
                                   seed.row_seeds(calls, hi - lo))
                index[lo:hi] = [[tables.block_index(c, tuple(z)) for z in blocks]
                                for c, blocks in zip(row_contexts, drafted.tolist())]
            draft_tokens, draft_probs, target_probs = tables.gather(index[lo:hi])
            carried = np.flatnonzero(sid[lo:hi] >= 0)
            if carried.size:  # the modified target rows, once per distinct (state, block)
                pairs = np.stack([np.repeat(sid[lo:hi][carried], K), index[lo:hi][carried].reshape(-1)], 1)
                distinct, where = np.unique(pairs, axis=0, return_inverse=True)
                new_rows = np.stack([carrier.target_rows(int(s_), int(b)) for s_, b in distinct])
                target_probs[np.repeat(carried, K), np.tile(np.arange(K), carried.size)] = new_rows[where.reshape(-1)]
            verdict = verifier(draft_tokens, draft_probs, target_probs,
                               seeds=seed.row_seeds(calls, hi - lo))
            taus[lo:hi], emitted[lo:hi], records[lo:hi] = _check_output(verdict, draft_tokens, L, V)
            calls, rows, n_carried = calls + 1, rows + hi - lo, n_carried + carried.size
        opened = np.array([r is not None for r in records], dtype=bool)
        n_mod += int(opened.sum())
        if first_tau is None:
            first_tau = taus.copy()
        before = length[live].copy()
        for j in range(L + 1):
            sel = j <= taus
            out[live[sel], length[live[sel]] + j] = emitted[sel, j]
        length[live] += taus + 1
        # the next state of each generation still short of L + 1 tokens that had or opened a window
        state[live] = -1
        for r in np.flatnonzero((opened | (sid >= 0)) & (length[live] < L + 1)).tolist():
            context = tuple(out[live[r], :before[r]].tolist()) if sid[r] < 0 else ()
            state[live[r]] = carrier.advance(int(sid[r]), context, tuple(emitted[r, :taus[r] + 1].tolist()),
                                             records[r])
    return out[:, :L + 1], first_tau, calls, rows, n_mod, n_carried


# ------------------------------------------------------------------------------------ tests


def _gtest_result(name: str, samples: list, law: dict, a: float) -> LosslessTest:
    g = gtest(counts_from_samples(samples), law, a)
    return LosslessTest(name, a, g.pvalue, g.passed, g.detectable_tv_law, g.statistic,
                        g.n_cells_after_merge, g.merged_mass, g.detectable_tv,
                        empirical_tv(samples, law), worst_cells(samples, law), g.summary())


def _position_test(emitted: np.ndarray, d: int, block: np.ndarray, target: ToyModel, a: float) -> LosslessTest:
    """The law of the token at position d (0-based, d ≥ 1) given the emitted prefix of d tokens.

    A lossless verifier emits x_d after the prefix c with probability q(x_d | c), whatever the
    law of c.  For every prefix c whose expected count N·q(c) reaches ``MIN_KEY_EXPECTED``
    (eligibility from the law and N, as ``oracle.conditional_gtest.conditional_gtests``) the n_c samples
    with prefix c are G-tested against q(· | c) (``oracle.gtest.gtest``, its pooling); given the
    prefix counts these tests are independent, so G = Σ_c G_c is χ² with Σ_c dof_c degrees of
    freedom under the null (the decomposition of the joint G-test by position: Sokal & Rohlf,
    *Biometry*, §17; one test per position instead of one Bonferroni share per prefix, so the
    power does not fall with the number of prefixes).  Any emitted token of probability 0 after
    its prefix (eligible or not) fails outright (p = 0).

    δ (``detectable``): the smallest mean conditional TV Σ_c (n_c/n_e)·TV(law(x_d | c), q(· | c))
    over the n_e samples on eligible prefixes detected with power 0.99 (non-central χ² with
    λ ≥ 4·n_e·δ², Jensen over the prefixes: ``oracle.gtest_power.detectable_tv`` at n_e and dof + 1
    cells), plus the share of samples on ineligible prefixes and the pooled mass (each weighted
    by its prefix's share): a bound on the mean conditional TV over all N samples.

    Args:
        emitted: int64 [N, L+1], the first L + 1 emitted tokens.  d: position, 1 ≤ d ≤ L.
        block: the target's law of L + 1 tokens, float64 (V,)*(L+1).  target: the target model
            (its conditionals after each prefix).  a: the level.
    """
    N = emitted.shape[0]
    prefix_law = block.sum(axis=tuple(range(d, block.ndim)))  # (V,)*d
    keys, counts = np.unique(emitted[:, :d + 1], axis=0, return_counts=True)
    by_prefix: dict[tuple, dict[int, int]] = {}
    for row, c in zip(keys.tolist(), counts.tolist()):
        by_prefix.setdefault(tuple(row[:d]), {})[row[d]] = c
    G = 0.0
    dof = n_keys = 0
    n_e = 0
    pooled = 0.0
    observed_tv = 0.0
    violations = []
    worst = []
    for prefix, cell_counts in by_prefix.items():
        q = target.conditional(prefix)
        n_c = sum(cell_counts.values())
        bad = [x for x, c in cell_counts.items() if q[x] <= 0]
        if bad:
            violations.extend(prefix + (x,) for x in bad)
            continue
        if N * float(prefix_law[prefix]) < MIN_KEY_EXPECTED or np.count_nonzero(q) < 2:
            continue
        law = {x: float(p) for x, p in enumerate(q) if p > 0}
        g = gtest(cell_counts, law, a)
        G, dof, n_e, n_keys = G + g.statistic, dof + g.dof, n_e + n_c, n_keys + 1
        pooled += n_c * g.merged_mass
        obs = np.zeros(q.size)
        for x, c in cell_counts.items():
            obs[x] = c
        observed_tv += 0.5 * float(np.abs(obs - n_c * q).sum())
        x = int(np.argmax(np.abs(obs - n_c * q) / np.sqrt(np.maximum(n_c * q, 1e-300))))
        worst.append((prefix + (x,), int(obs[x]), float(n_c * q[x])))
    worst = tuple(sorted(worst, key=lambda w: -abs(w[1] - w[2]) / math.sqrt(max(w[2], 1e-300)))[:3])
    name = position_test_name(d)
    if violations:
        shown = ", ".join(map(repr, violations[:3]))
        return LosslessTest(name, a, 0.0, False, math.nan, math.inf, worst_cells=worst,
                            summary=f"{name} FAIL: tokens of target probability 0 after their prefix emitted: {shown}")
    if dof == 0:
        return LosslessTest(name, a, 1.0, True, 1.0, 0.0,
                            summary=f"{name}: no prefix with an expected count ≥ {MIN_KEY_EXPECTED:g} and two "
                                    "possible tokens: the test has no information")
    p = float(scipy_stats.chi2.sf(G, dof))
    delta = detectable_tv(n_e, a, POWER, n_cells=dof + 1)
    delta_law = min(1.0, delta + (N - n_e) / N + pooled / N)
    passed = p >= a
    summary = (f"{name} {'PASS' if passed else 'FAIL'}: G = {G:.6g}, dof = {dof}, p = {p:.4g}, alpha = {a:.3g}, "
               f"{n_e} of {N} samples on eligible prefixes, δ {delta:.4g} on them, {delta_law:.4g} on all")
    return LosslessTest(name, a, p, passed, delta_law, G, dof + n_keys, pooled / N, delta,
                        observed_tv / max(n_e, 1), worst, summary)


VERIFIER_OUTPUT = "verifier output"


def _drafted(drafter, next_probs, K: int, L: int, V: int, seeds: np.ndarray) -> np.ndarray:
    """int64 [B, K, L]: the caller's drafter called as ``drafter(next_probs, K, L, seeds=seeds)``
    (module doc, "Drafter and verifier as one system"), B = len(seeds).

    Raises:
        ContractViolation: the drafter's tokens are not integers of shape [B, K, L] in [0, V)
            (a block of draft probability 0 is refused where it is looked up).
    """
    B = len(seeds)
    out = np.asarray(to_numpy(drafter(next_probs, K, L, seeds=np.array(seeds, dtype=np.int64))))
    if out.shape != (B, K, L) or not np.issubdtype(out.dtype, np.integer):
        raise ContractViolation(f"the drafter returned {out.dtype} tokens of shape {list(out.shape)}, expected "
                                f"integers of shape [B, K, L] = [{B}, {K}, {L}]")
    out = out.astype(np.int64)
    if ((out < 0) | (out >= V)).any():
        raise ContractViolation(f"the drafter proposed a token id outside [0, {V})")
    return out


class _VocabRows:
    """A ``VocabPair``'s rows as the verifier is told them (rounded to the dtype), with the
    ``context``/``gather`` of ``_PrefixTables`` (for ``lossless_seed_checks``): block j is token j."""

    def __init__(self, pair: VocabPair, dtype: str):
        self.V, self.dtype = pair.V, dtype
        self.dp, self.tp = round_to_dtype(pair.draft, dtype), round_to_dtype(pair.target, dtype)
        self.law_p = renormalise_rows(self.dp)
        self.law_q = renormalise_rows(self.tp)

    def context(self, c: tuple) -> tuple[int, np.ndarray]:
        return 0, self.law_p

    def gather(self, index: np.ndarray):
        """(draft_tokens [..., 1], draft_probs [..., 1, V], target_probs [..., 2, V]) of the
        tokens ``index`` [B, K] (broadcast views of the pair's rows)."""
        index = np.asarray(index, dtype=np.int64)
        shape = index.shape
        return (index[..., None], np.broadcast_to(self.dp, shape + (1, self.V)),
                np.broadcast_to(self.tp, shape + (2, self.V)))


def _vocab_run(verifier, pair: VocabPair, K: int, N: int, alpha: float, chunk: int, seed: CaseSeeds,
               dtype: str, drafter, start: float) -> LosslessCaseResult:
    """One ``VocabPair`` (module doc, "Pairs at a real vocabulary"): N = min(n_samples,
    samples_cap) first calls of K drafts of one token, and its four tests at α/4."""
    rows = _VocabRows(pair, dtype)
    V, a = pair.V, alpha / 4
    chunk = rows_per_call(chunk, K, 1, V)
    rng = seed.draft_rng()
    firsts = np.empty(N, dtype=np.int64)
    taus = np.empty(N, dtype=np.int64)
    done = calls = 0
    while done < N:
        B = min(chunk, N - done)
        seeds = seed.row_seeds(calls, B)
        if drafter is None:
            index = rng.choice(V, size=(B, K), p=rows.law_p)
        else:
            index = _drafted(drafter, lambda t: np.broadcast_to(rows.dp, np.shape(t)[:2] + (V,)), K, 1, V, seeds)[..., 0]
            if (rows.law_p[index] <= 0).any():
                raise ContractViolation("the drafter proposed a token of draft probability 0 under the draft row "
                                        "it was handed")
        draft_tokens, draft_probs, target_probs = rows.gather(index)
        tau, tokens, _ = _check_output(verifier(draft_tokens, draft_probs, target_probs, seeds=seeds),
                                       draft_tokens, 1, V)
        firsts[done:done + B], taus[done:done + B] = tokens[:, 0], tau
        done, calls = done + B, calls + 1
    law = {x: float(p) for x, p in enumerate(rows.law_q) if p > 0}
    counts = counts_from_samples(firsts.tolist())
    first = _gtest_result("first token", firsts.tolist(), law, a)
    coarse = coarse_gtest(counts, law, a)
    ident = identity_test(counts, law, a)
    q, p = rows.law_q, rows.law_p
    ceiling = float(np.minimum(q, 1.0 - (1.0 - p) ** K).sum())
    ceil_test, low = _ceiling_test(taus, ceiling, a)
    tests = (first,
             LosslessTest(VOCAB_TESTS[1], a, coarse.pvalue, coarse.passed, coarse.detectable_tv,
                          coarse.test.statistic, coarse.bins.n_bins, summary=coarse.summary()),
             LosslessTest(VOCAB_TESTS[2], a, ident.pvalue, ident.passed, ident.detectable_tv,
                          ident.statistic, ident.head_cells, ident.tail_mass, summary=ident.summary()),
             ceil_test)
    notes = (f"first call only (blocks of one token, context-free rows) at N = {N}; the first token's law over its "
             f"{V:,} tokens by the G-test, the coarsened G-test (oracle.coarsen) and the identity test "
             "(oracle.identity); records are not carried (no later call)")
    return LosslessCaseResult(pair.name, f"VocabPair draft row (V = {V:,})", f"VocabPair target row (V = {V:,})",
                              V, K, 1, dtype, N, alpha, tests, float(taus.mean()), low, ceiling,
                              "prefix-match U = global OT at L = 1 (docs/bounds.md §6)", calls, N, 0, 0,
                              time.perf_counter() - start, notes)


def _stopped(pair, K: int, L: int, dtype: str, N: int, alpha: float, a: float, err: Exception,
             seconds: float) -> LosslessCaseResult:
    """The result of a pair whose verifier raised, or broke the contract's outputs, while
    decoding: one failed test, ``VERIFIER_OUTPUT``, with the error as its summary; no law was
    tested."""
    why = "broke the contract" if isinstance(err, ContractViolation) else "raised"
    summary = f"{VERIFIER_OUTPUT} FAIL: the verifier {why}: {type(err).__name__}: {err}"
    test = LosslessTest(VERIFIER_OUTPUT, a, 0.0, False, math.nan, math.nan, summary=summary)
    draft, target = ((repr(pair.draft), repr(pair.target)) if isinstance(pair, ToyPair) else
                     (f"VocabPair draft row (V = {pair.V:,})", f"VocabPair target row (V = {pair.V:,})"))
    return LosslessCaseResult(pair.name, draft, target, pair.V, K, L, dtype, N, alpha, (test,),
                              math.nan, math.nan, math.nan, "", 0, 0, 0, 0, seconds,
                              "decoding stopped: " + summary)


def _ceiling_test(taus: np.ndarray, ceiling: float, a: float) -> tuple[LosslessTest, float]:
    """One-sided test of E[τ] ≤ ceiling: (the LosslessTest, the lower end of the (1 − a) interval).

    The interval is ``oracle.mean_tests.mean_ci`` at confidence 1 − 2a (two-sided, so each side
    1 − a), normal approximation with the sample variance; p = P(Z ≥ (mean − c)/se).  With a
    zero sample variance (all N values of τ equal to t) the normal approximation says nothing;
    then p = (c/t)^N when t > c, exact: by Markov's inequality a lossless rule has
    P(τ ≥ t) ≤ E[τ]/t ≤ c/t, so N independent calls all reach t with probability ≤ (c/t)^N;
    p = 1 when t ≤ c.
    """
    ci = mean_ci(taus.astype(np.float64), confidence=1.0 - 2.0 * a)
    c = ceiling + CEILING_SLACK
    if ci.std_error > 0:
        z = (ci.mean - c) / ci.std_error
        p = float(scipy_stats.norm.sf(z))
    else:
        z = math.copysign(math.inf, ci.mean - c) if ci.mean != c else 0.0
        p = float(np.exp(ci.n * np.log(c / ci.mean))) if ci.mean > c else 1.0
    excess = float((scipy_stats.norm.isf(a) + scipy_stats.norm.isf(1.0 - POWER)) * ci.std_error)
    passed = p >= a
    summary = (f"acceptance ceiling {'PASS' if passed else 'FAIL'}: mean τ {ci.mean:.6g}, one-sided "
               f"{100 * (1 - a):.7g}% lower end {ci.low:.6g} vs ceiling {ceiling:.6g}, z = {z:.3g}, "
               f"p = {p:.3g}, n = {ci.n}")
    return LosslessTest("acceptance ceiling", a, p, passed, excess, z, summary=summary), ci.low


# ------------------------------------------------------------------------------------ API


def _check_args(K, L, n_samples, alpha, chunk, dtype, seed):
    K, L = check_positive_int(K, "K"), check_positive_int(L, "L")
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2 (the mean test needs two), got {n_samples!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must lie in the open interval (0, 1), got {alpha!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return K, L, int(n_samples), float(alpha), int(chunk), int(seed)


def _table_bytes(V: int, L: int) -> int:
    """Upper estimate of ``_PrefixTables``' memory: Σ_{i≤L} V^i contexts × V^L blocks × their
    float64 rows ((2L + 1)·V) and tokens (L), twice (the Decoder's row cache holds as much)."""
    contexts = sum(V ** i for i in range(L + 1))
    return 2 * contexts * V ** L * 8 * ((2 * L + 1) * V + L)


def _pairs(models, K: int, L: int) -> list[tuple[ToyPair, int]]:
    """(pair, the L it runs at) for every pair that runs at K: ``ToyPair.run_L``, pairs with
    ``min_K`` > K left out.

    Raises:
        ValueError: malformed ``models``, no pair runs at this K, a vocabulary mismatch, or a
            pair whose tables or joint law at its L would not enumerate.
    """
    if models is None:
        pairs = list(default_pairs())
    else:
        if isinstance(models, (ToyPair, VocabPair)) or (isinstance(models, tuple) and len(models) == 2 and all(
                isinstance(m, ToyModel) for m in models)):
            models = [models]
        pairs = []
        for j, m in enumerate(models):
            if isinstance(m, (ToyPair, VocabPair)):
                pairs.append(m)
            elif isinstance(m, (tuple, list)) and len(m) == 2 and all(isinstance(x, ToyModel) for x in m):
                pairs.append(ToyPair(f"pair {j}", m[0], m[1]))
            else:
                raise ValueError(f"models must hold ToyPair or VocabPair objects or (draft, target) pairs of "
                                 f"ToyModels, got {type(m).__name__} at index {j}")
        if not pairs:
            raise ValueError("models is empty: nothing to certify (a run with no pair would pass vacuously)")
    runs = [(pr, pr.run_L(L)) for pr in pairs if K >= pr.min_K]
    if not runs:
        raise ValueError(f"models: no pair runs at K = {K} (each has min_K > K): nothing to certify")
    for pr, L_pair in runs:
        if isinstance(pr, VocabPair):  # validated at construction; one call per sample
            continue
        if pr.draft.vocab_size != pr.target.vocab_size:
            raise ValueError(f"models: pair {pr.name!r} has a vocabulary mismatch, draft V = "
                             f"{pr.draft.vocab_size}, target V = {pr.target.vocab_size}")
        if _table_bytes(pr.V, L_pair) > MAX_TABLE_BYTES or pr.V ** (L_pair + 1) > MAX_JOINT_CELLS:
            raise ValueError(f"L = {L_pair} is too long for pair {pr.name!r} (V = {pr.V}): the rows of the V^L = "
                             f"{pr.V ** L_pair} draft blocks after every context would take "
                             f"{_table_bytes(pr.V, L_pair) / 2**20:,.0f} MiB (at most {MAX_TABLE_BYTES / 2**20:,.0f}) "
                             f"and the joint law has V^(L+1) = {pr.V ** (L_pair + 1)} cells (at most "
                             f"{MAX_JOINT_CELLS}); both must enumerate (or give the pair a max_L)")
    return runs


def certify_lossless(verifier, *, K: int, L: int, models=None, n_samples: int = DEFAULT_SAMPLES,
                     alpha: float = 1e-6, seed: int = 0, chunk: int = 4096, dtype: str = "float64",
                     drafting: str = "iid", input_checks: bool = True, drafter=None,
                     progress: Callable[[LosslessCaseResult], None] | None = None) -> LosslessReport:
    """Certify that ``verifier`` is lossless, with no reference rule (module doc).

    Args:
        verifier: an object with the batched contract (reference/contract.py), called as
            ``verifier(draft_tokens int64 [B, K, L], draft_probs [B, K, L, V],
            target_probs [B, K, L+1, V], seeds=int64 [B])`` with numpy arrays (float64, or float32
            holding the rounded rows for dtype "float32"/"bfloat16") and returning ``tau`` [B]
            and ``tokens`` [B, L+1] (numpy or tensors), ``selected`` [B] (checked where τ > 0)
            and optionally ``modification`` (a ``BatchModification``; carried into the
            generation's later calls as their modified targets: module doc, "Carried
            modifications").  Row b must draw its randomness from seeds[b] alone.
        K: drafts per call (1 for a single-draft verifier), integer ≥ 1.
        L: block length, integer ≥ 1.
        models: None for ``default_pairs()`` (oracle/lossless_pairs.py: 9 pairs at K = 1, 10 at
            K ≥ 2, the two ``VocabPair`` s at V = 151,936 and 32,768 among them), or a sequence of
            ``ToyPair`` / ``VocabPair`` / (draft, target) ToyModel pairs (each run
            at min(L, its max_L) when K ≥ its min_K; toy sizes: V^(L+1) ≤ 65,536 joint cells, and the rows of every draft
            block after every context of ≤ L tokens within ``MAX_TABLE_BYTES`` = 1 GiB, e.g.
            V = 8 at L = 3, V = 5 at L = 4).
        n_samples: N generations per pair, ≥ 2 (default ``oracle.defaults.DEFAULT_SAMPLES``,
            20,000, the plugin's).
        alpha: false-alarm rate per pair, in (0, 1); each of the pair's m = 3 + L_pair tests runs
            at α/m (Bonferroni), so a lossless verifier fails a pair with probability ≤ α (nominal: the
            G-tests' χ² and the mean's normal approximations, oracle/gtest.py, oracle/mean_tests.py).
        seed: base seed; pair j draws its drafts from ``CaseSeeds(seed, j).draft_rng()`` and
            gives call c the row seeds ``CaseSeeds(seed, j).row_seeds(c, B)`` (oracle/seeding.py:
            hashed 63-bit seeds, unrelated across rows, calls, pairs and base seeds).
        chunk: rows per verifier call, ≥ 1.
        dtype: rows handed over as "float64", "float32" or bfloat16-rounded "bfloat16" (float32
            arrays); the drafts and the expected laws are those of the rounded rows,
            renormalised (as ``oracle.certify.FixedCase``).
        drafting: "iid" (the only value: module doc, "Drafting").
        drafter: None (the harness draws K i.i.d. blocks from the draft model), or the caller's
            drafter, called with the rows' seeds before each verifier call (module doc, "Drafter
            and verifier as one system"): the pair's law is then that of the two together.
        input_checks: run the input probes (``oracle.input_probes``: NaN, ±inf, negative and
            unnormalised draft rows, a drafted token of draft probability 0, NaN in a target row
            must each raise ValueError, reference/contract.py) into ``report.probes``; default True.
        progress: called with each pair's LosslessCaseResult.
    Returns:
        LosslessReport: ``ok``, ``failed`` (pair → failed tests), ``table()``, ``to_json()``,
        ``results`` (LosslessCaseResult per pair: N, α, per test α/m, p-value, detectable δ or
        excess; mean τ with its one-sided lower end; the ceiling and which one), ``seed_checks``
        (the seed contract's "seed replay", "seed dependence" and "batch independence" on the
        first toy pair's first-call rows: ``oracle.seed_contract.lossless_seed_checks``; a
        failure is "seed contract" in ``failed``), ``probes`` (the input probes; a failure is
        "input probes" in ``failed``) and ``not_seen`` (what the run did not look at: pairs not
        run, blocks below the L asked, temperatures, the record when none was returned, the
        drafter when none was given, the coin extremes, the input probes when turned off).
    Raises:
        ValueError: K or L not an integer ≥ 1, n_samples < 2, alpha outside (0, 1), chunk < 1,
            an unknown dtype, ``drafting`` other than "iid", malformed models (vocabulary
            mismatch, V^L or V^(L+1) too large at the pair's L, no pair with min_K ≤ K).
            A verifier that raises, or returns outputs that break the contract (τ or tokens of
            the wrong shape, τ outside [0, L], an emitted token id outside [0, V), ``selected``
            outside [0, K) where τ > 0, accepted tokens that are not the first τ tokens of the
            selected draft block, a modification record of an unknown kind, of fields not of
            shape [B], or with an active row whose ρ is not finite and ≥ 0 or whose log joints
            are NaN or +inf), fails the pair's "verifier output" test with the error as its
            summary: a verdict, not an exception.
        TypeError: ``verifier`` is not callable.
    Sources: G-test and its power, oracle/gtest.py and oracle/gtest_power.py (Sokal & Rohlf; Mitra 1958; Cohen 1988);
        the ceilings, docs/bounds.md §4.3 (global OT) and §6 (prefix-match U).
    """
    K, L, N, alpha, chunk, seed = _check_args(K, L, n_samples, alpha, chunk, dtype, seed)
    if drafting not in DRAFTING:
        raise ValueError(f"drafting must be 'iid', got {drafting!r}: certify_lossless drafts the K blocks of "
                         "every call i.i.d. from the draft model (what serving engines with K independent "
                         "drafts send, and what its acceptance ceiling assumes); a rule for drafts drawn "
                         "without replacement or for draft trees is lossless only under its own drafting, "
                         "which this harness does not produce")
    if not callable(verifier):
        raise TypeError(f"verifier must be callable with the batched contract, got {type(verifier).__name__}")
    runs = _pairs(models, K, L)
    report = LosslessReport()
    for j, (pair, L_pair) in enumerate(runs):
        start = time.perf_counter()
        case_seed = CaseSeeds(seed, j)
        if isinstance(pair, VocabPair):
            n_pair = min(N, int(pair.samples_cap))
            try:
                result = _vocab_run(verifier, pair, K, n_pair, alpha, chunk, case_seed, dtype, drafter, start)
            except Exception as err:  # a defect of the verifier or drafter: the pair's verdict
                result = _stopped(pair, K, 1, dtype, n_pair, alpha, alpha / 4, err, time.perf_counter() - start)
            report.results.append(result)
            if progress is not None:
                progress(result)
            continue
        a = alpha / (len(TESTS) + L_pair)
        tables = _tables(pair, L_pair, dtype)
        try:
            emitted, first_tau, calls, rows, n_mod, n_carried = _decode(verifier, tables, K, N, chunk, case_seed,
                                                                        drafter)
        except Exception as err:  # a defect of the verifier: the pair's verdict, not an exception
            result = _stopped(pair, K, L_pair, dtype, N, alpha, a, err, time.perf_counter() - start)
            report.results.append(result)
            if progress is not None:
                progress(result)
            continue
        draft_law, target_law = _law_model(pair.draft, dtype), _law_model(pair.target, dtype)
        first_law = {x: float(p) for x, p in enumerate(target_law.conditional(())) if p > 0}
        block = target_law.block_law(L_pair + 1)
        joint_law = {z: float(block[z]) for z in itertools.product(range(pair.V), repeat=L_pair + 1) if block[z] > 0}
        first = _gtest_result("first token", emitted[:, 0].tolist(), first_law, a)
        joint = _gtest_result("joint", [tuple(r) for r in emitted.tolist()], joint_law, a)
        ceiling, ceiling_name = lossless_ceiling(draft_law, target_law, K, L_pair)
        ceil_test, low = _ceiling_test(first_tau, ceiling, a)
        positions = tuple(_position_test(emitted, d, block, target_law, a) for d in range(1, L_pair + 1))
        if n_mod:
            notes = (f"Algorithm 2 records carried: the verifier returned one on {n_mod} of {rows} rows; "
                     f"{n_carried} rows of later calls got the modified target of their state "
                     "(reference.decode.Decoder windows)")
        else:
            notes = "memoryless: no Algorithm 2 record returned, each call got the plain target's rows for its context"
        if L_pair < L:
            notes += f"; run at L = {L_pair} < the L = {L} asked (the pair's max_L = {pair.max_L})"
        result = LosslessCaseResult(
            pair.name, repr(pair.draft), repr(pair.target), pair.V, K, L_pair, dtype, N, alpha,
            (first, joint, ceil_test) + positions, float(first_tau.mean()), low, ceiling, ceiling_name,
            calls, rows, n_mod, n_carried, time.perf_counter() - start, notes)
        report.results.append(result)
        if progress is not None:
            progress(result)
    j, (first_pair, first_L) = next(((j, r) for j, r in enumerate(runs) if isinstance(r[0], ToyPair)),
                                    (0, runs[0]))
    rows_of = (_VocabRows(first_pair, dtype) if isinstance(first_pair, VocabPair)
               else _tables(first_pair, first_L, dtype))
    report.seed_checks = lossless_seed_checks(verifier, rows_of, K, CaseSeeds(seed, j),
                                              f"pair {first_pair.name!r}, first call")
    if input_checks:
        report.probes = input_probes(verifier, K, L)
    report.not_seen = _not_seen(verifier, models, runs, K, L, report, input_checks, drafter)
    return report


def _not_seen(verifier, models, runs, K: int, L: int, report: LosslessReport, input_checks: bool,
              drafter) -> list[str]:
    """``LosslessReport.not_seen``: what this run did not look at, one line each."""
    out = []
    ran = {pr.name for pr, _ in runs}
    if models is None:
        left = [pr for pr in default_pairs() if pr.name not in ran]
        if left:
            out.append("pairs not run at this K: " + "; ".join(f"{pr.name} (needs K ≥ {pr.min_K})" for pr in left))
    else:
        out.append("the default pairs (oracle.lossless_pairs.default_pairs): models= replaced them")
    short = [f"{pr.name} at L = {L_pair}" for pr, L_pair in runs if L_pair < L]
    if short:
        out.append(f"blocks of the L = {L} asked on every pair: " + ", ".join(short) + " (their max_L)")
    if not getattr(verifier, "certifies_temperatures", False):
        out.append("per-request temperatures: the plain contract hands probabilities, no temperature (a sampler "
                   "that tempers is certified through gpu_backend.adapters.vllm_adapter.from_vllm_layout)")
    if not any(r.modification_rows for r in report.results):
        out.append("Algorithm 2 record: none returned, every call was memoryless (a rule that needs its record "
                   "fails the laws; one that keeps it to itself is certified as the memoryless rule it then is)")
    if drafter is None:
        out.append("the drafter: drafts are the harness's own i.i.d. draws from the draft model (drafter= certifies "
                   "yours with the verifier, their noise as your code wires it)")
    return out + not_seen_by_probes(input_checks)


def not_seen_by_probes(input_checks: bool) -> list[str]:
    """The "not seen" lines every certification's PASS shares: the coin-boundary probes (run only
    by ``oracle.harness.boundary_probes``) and, when ``input_checks`` is False, the input probes."""
    out = ["coins at their extremes and ties (u = 2^-53, u = 1): oracle.harness.boundary_probes, for a verifier "
           "that takes noise="]
    if not input_checks:
        out.append("impossible inputs (non-finite, negative, unnormalised rows; drafts of draft probability 0): "
                   "input_checks=False, the input probes did not run")
    return out
