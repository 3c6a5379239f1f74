"""Certification of any verifier against the reference's exact law.

Any object with the batched contract (reference/contract.py) can be certified:

    verdict = verifier(draft_tokens [B,K,L] int64, draft_probs [B,K,L,V],
                       target_probs [B,K,L+1,V], seeds=int64 [B])

The harness hands numpy arrays (the rows of a fixed case are a zero-stride broadcast view
along B: one row, B times) and reads ``verdict.tau`` and ``verdict.tokens`` (numpy arrays or
tensors of any device).  Row b must draw its randomness from seeds[b] alone; each row's seed
is a 63-bit hash of (base seed, case, call, row) (oracle/seeding.py), and every ``certify``
checks that the verifier keeps this seed contract: the same seeds replay the same outputs, and
fresh seeds change them, and a row's outputs do not depend on its batch (oracle/seed_contract.py;
``CertificationReport.seed_checks``).  A defect the harness detects is a verdict, never an
exception: a verifier that raises or returns outputs that break the contract fails its case's
"verifier output" check with the error as the reason (``certify_case``), and for a rule that
modifies later targets every sampled row's Algorithm 2 record is checked against the
reference's ("Algorithm 2 record", oracle/record_check.py); both are ``CaseResult.checks``.

Two kinds of case:

* ``FixedCase`` — fixed draft blocks; the backend's outcomes (τ, accepted prefix, emitted
  token) are compared with the reference rule's exact law *given those drafts*
  (``exact_verdict_law``): a G-test of the joint outcome, the law of τ, and the conditional
  law of the emitted token given (τ, accepted prefix), plus mean τ against the exact E[τ | drafts].
  This certifies that the backend implements the same rule as the reference.
* ``FirstTokenCase`` — fresh drafts from a toy draft model for every sample; the law of the
  first emitted token is compared with the target's.  Every lossless rule passes; the released
  SpecTr-GBV fails (docs/rules.md §2.5) — the planted case that a law-level check must catch.

Each case is one family of four tests at α/4 each (Bonferroni), so a correct backend fails a
case with probability ≤ α; a fixed case whose exact law has more than ``COARSE_BINS`` (64)
outcomes of positive probability (the V = 4,096 rows, not the toy cases) adds a fifth, the
coarsened G-test of oracle.coarsen (outcomes sorted by τ then exact probability, in 64 bins of
nearly equal exact mass), and a sixth, the identity test of oracle.identity (a 2/3-power
weighted χ² on the whole law with a bucketed tail), and its six tests run at α/6 each
(``CaseResult.n_tests``).  The coarsened test's δ (``CaseResult.detectable_tv_coarse``) is on
the coarsened law: it does not see mass moved inside a bin.  The identity test's δ
(``CaseResult.detectable_tv_identity``) is on the whole law, at the least favourable direction
(oracle.identity module doc), far below the joint test's where most outcomes are rare;
``CaseResult.resolved`` lists each test's δ and the law it is on.  The case's δ below stays the
joint test's.  ``case_power`` gives both δ's
for a case and N before sampling.  Each result states N, α and δ, the smallest total-variation
deviation of the joint outcome law detected with power 0.99.  The guarantee that holds: the
joint G-test pools the outcomes of expected count < 5 (at V = 4,096 about 3 % of the mass at
N = 5·10^4, 0.7 % at 2·10^5) and cannot see mass moved inside a pooled group, so δ is the
G-test's power bound on the pooled cells plus the pooled mass
(``oracle.gtest.GTestResult.detectable_tv_law``): every backend whose outcome law is at TV ≥ δ
from the reference's fails the case with probability ≥ 0.99.  ``pooled_mass`` is reported.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from collections.abc import Mapping
from typing import Callable, Sequence

import numpy as np

from spectr_gbv.reference.contract import ContractViolation, to_numpy
from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.exact import draft_paths
from spectr_gbv.reference.models import ToyModel
from spectr_gbv.reference.randomness import enumerate_law_draw_last
from spectr_gbv.reference.rules import Rule, get_rule
from spectr_gbv.reference.validation import check_iteration_inputs

from spectr_gbv.oracle.coarsen import COARSE_BINS, coarse_gtest, coarse_power
from spectr_gbv.oracle.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES
from spectr_gbv.oracle.identity import IdentityPower, identity_power, identity_test
from spectr_gbv.oracle.outcome import verdict_word
from spectr_gbv.oracle.record_check import RecordCheck, modifies_targets
from spectr_gbv.oracle.seed_contract import (REPLAY_ROWS, UNKNOWN_LAW_ROWS, SeedCheck, check_seed_contract,
                                             collision_probability, rows_needed)
from spectr_gbv.oracle.seeding import CaseSeeds
from spectr_gbv.oracle.conditional_gtest import conditional_gtests
from spectr_gbv.oracle.gtest import counts_from_samples, gtest, law_of
from spectr_gbv.oracle.gtest_power import GTestPower, gtest_power
from spectr_gbv.oracle.mean_tests import mean_within_ci

Outcome = tuple  # (tau, accepted prefix tuple, emitted correction/bonus token)


def exact_verdict_law(rule: Rule, draft_tokens, draft_probs, target_probs) -> dict[Outcome, float]:
    """Exact law of (τ, accepted prefix, emitted token) of ``rule`` given fixed draft blocks.

    Enumerated by ``reference.randomness.enumerate_law_draw_last``: every path of the rule's
    coins once, the final draw (correction or bonus) expanded over its support as a vector, so
    the cost is linear in V (V = 151,936 rows take seconds; replaying each token would take hours).

    Args:
        rule: a reference Rule.
        draft_tokens: int [K, L]; draft_probs: float [K, L, V]; target_probs: float [K, L+1, V].
    Returns:
        dict outcome → probability (float64).
    Raises:
        ValueError: malformed inputs (see ``reference.validation.check_iteration_inputs``).
        reference.randomness.DrawNotLastError: the rule tosses a coin or draws after its draw.
    """
    block = rule.prepare(draft_tokens, draft_probs, target_probs)

    def outcome(src) -> Outcome:
        verdict = rule.decide(block, src)
        return (verdict.tau, verdict.accepted, verdict.last_token)

    return enumerate_law_draw_last(outcome, lambda o, token: (o[0], o[1], token))


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to float64, float32 or bfloat16 (round to nearest even), as float64
    (bfloat16) or float32/float64 arrays that a backend can take without further rounding.

    Raises:
        ValueError: unknown dtype name.
    """
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float64":
        return x
    f32 = x.astype(np.float32)
    if dtype == "float32":
        return f32
    if dtype == "bfloat16":
        bits = f32.view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)
    raise ValueError(f"backend_dtype must be float64, float32 or bfloat16, got {dtype!r}")


def renormalise_rows(x: np.ndarray) -> np.ndarray:
    """float64 copy of ``x`` [..., V] with each row divided by its sum (rows of positive sum)."""
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum(axis=-1, keepdims=True)


@dataclass
class FixedCase:
    """Fixed draft blocks; the expected law is ``reference_rule``'s exact law given them.

    Attributes:
        name: label.  rule: the backend's rule name.  reference_rule: reference rule name whose
        law is expected (usually the same name).  draft_tokens [K, L], draft_probs [K, L, V],
        target_probs [K, L+1, V] (float64; after construction, the renormalised rows the
        backend actually sees).
        expect_pass: False for planted wrong rules, which the certification must catch.
        backend_dtype: "float64", "float32" or "bfloat16": the rows are rounded to it
        (``backend_draft_probs``/``backend_target_probs``, float32 arrays for the two narrow
        dtypes; bfloat16 values are exact in float32, the adapter converts without rounding).
        samples_cap: None, or the most samples the case is run at (``certify_case`` runs
            min(N, samples_cap)): a case of a real vocabulary hands the verifier K·(2L + 1)·V
            probabilities per row, and its tests resolve its law with fewer rows
            (``oracle.certify_cases.vocab_case``).
    """

    name: str
    rule: str
    reference_rule: str
    draft_tokens: np.ndarray
    draft_probs: np.ndarray
    target_probs: np.ndarray
    expect_pass: bool = True
    backend_dtype: str = "float32"
    samples_cap: int | None = None

    def __post_init__(self):
        if self.samples_cap is not None and (isinstance(self.samples_cap, bool) or int(self.samples_cap)
                                             != self.samples_cap or self.samples_cap < 2):
            raise ValueError(f"samples_cap must be None or an integer >= 2, got {self.samples_cap!r}")
        tokens, dp, tp = check_iteration_inputs(self.draft_tokens, self.draft_probs, self.target_probs)
        # The backend sees the rows rounded to its dtype; the expected law is that of the
        # rounded rows (renormalised), so rounding is not mistaken for a wrong rule.
        self.backend_draft_probs = round_to_dtype(dp, self.backend_dtype)
        self.backend_target_probs = round_to_dtype(tp, self.backend_dtype)
        self.draft_tokens = tokens
        self.draft_probs = renormalise_rows(self.backend_draft_probs)
        self.target_probs = renormalise_rows(self.backend_target_probs)

    @property
    def K(self) -> int:
        return self.draft_tokens.shape[0]

    @property
    def L(self) -> int:
        return self.draft_tokens.shape[1]

    @property
    def V(self) -> int:
        return self.draft_probs.shape[2]


@dataclass
class FirstTokenCase:
    """Fresh drafts from ``draft`` for every sample; expected: the target's first-token law."""

    name: str
    rule: str
    draft: ToyModel
    target: ToyModel
    K: int
    L: int
    expect_pass: bool = True
    backend_dtype: str = "float64"

    @property
    def V(self) -> int:
        return self.target.vocab_size


# The four tests of a FixedCase, each at α/4 (``_family``), in the order of ``tests_passed``.
TEST_NAMES = ("joint outcome", "law of τ", "token given (τ, prefix)", "mean τ", "coarsened law",
              "identity (whole law)")
# A FirstTokenCase has one test, the G-test of the first emitted token's law at α.
FIRST_TOKEN_TEST_NAMES = ("first-token law",)


@dataclass
class CaseResult:
    """Outcome of one case (all p-values are per test; each test ran at α/``n_tests``).

    ``detectable_tv`` is the guarantee on the whole outcome law (module doc): the joint
    G-test's bound on its pooled cells (``detectable_tv_pooled``) plus ``pooled_mass``.
    ``worst_cells``: up to ``WORST_CELLS`` outcomes (τ, accepted prefix, emitted token) — or
    first tokens for a FirstTokenCase — with the largest standardised deviation
    (O − E)/√E, as (outcome, observed count, expected count); an outcome of probability 0 that
    was observed comes first (its deviation is infinite).  ``empirical_tv``: ½ Σ |O/N − p| over
    the outcomes, the measured distance of the sampled law from the exact one (biased upwards by
    sampling noise, about √(cells/N); informative when it is well above ``detectable_tv``).
    ``tests_passed``: the pass/fail decision of each test of the family as ``certify_case``
    took it (``TEST_NAMES`` for a FixedCase, each at α/4, or α/6 with the coarsened and identity tests; ``FIRST_TOKEN_TEST_NAMES`` for a
    FirstTokenCase, at α); ``passed`` is their conjunction and ``failed_tests`` names the failed ones.
    ``n_tests``: the family's size, 4, or 6 with the coarsened and identity tests (module doc);
    the coarsened test's p-value ``pvalue_coarse``, δ on the coarsened law
    ``detectable_tv_coarse`` and number of bins ``coarse_bins`` are NaN, NaN and 0 when it did
    not run; the identity test's p-value ``pvalue_identity``, δ on the whole law
    ``detectable_tv_identity`` and tail mass ``identity_tail_mass`` are NaN when it did not run.
    ``checks``: the case's deterministic checks, each (name, passed, detail): "verifier output"
    (failed when the verifier raised, or returned outputs that break the contract — τ outside
    [0, L], a token id outside [0, V), wrong shapes —; sampling stopped there, the statistical
    tests did not run and their fields are NaN) and "Algorithm 2 record" (rules that modify
    later targets: ``oracle.record_check``).  ``passed`` includes them; ``failed_tests`` names
    the failed ones after the failed statistical tests.
    """

    name: str
    rule: str
    kind: str
    expect_pass: bool
    n: int
    alpha: float
    detectable_tv: float
    pvalue_joint: float
    pvalue_tau: float
    pvalue_conditional: float
    pvalue_mean: float
    mean_tau: float
    exact_mean_tau: float
    mean_ci: tuple[float, float]
    zero_cell_violations: int
    passed: bool
    seconds: float
    V: int
    K: int
    L: int
    dtype: str
    notes: str = ""
    pooled_mass: float = 0.0
    detectable_tv_pooled: float = math.nan
    worst_cells: tuple = ()
    empirical_tv: float = math.nan
    n_tests: int = 4
    pvalue_coarse: float = math.nan
    detectable_tv_coarse: float = math.nan
    coarse_bins: int = 0
    tests_passed: tuple = ()
    pvalue_identity: float = math.nan
    detectable_tv_identity: float = math.nan
    identity_tail_mass: float = math.nan
    checks: tuple = ()

    @property
    def resolved(self) -> dict[str, tuple[float, str]]:
        """Which test resolved what: test name → (δ at power 0.99, the law it is on).  The
        joint G-test's δ is on the whole law (its pooled mass included); the coarsened test's on
        the coarsened law (mass moved inside a bin is unseen); the identity test's on the whole
        law (oracle.identity: least favourable direction, tail mass included)."""
        out = {"joint outcome": (self.detectable_tv, "whole law")}
        if self.coarse_bins:
            out["coarsened law"] = (self.detectable_tv_coarse, f"coarsened law ({self.coarse_bins} bins)")
        if not math.isnan(self.detectable_tv_identity):
            out["identity (whole law)"] = (self.detectable_tv_identity, "whole law")
        return out

    @property
    def test_names(self) -> tuple[str, ...]:
        """The names of the tests behind ``tests_passed`` (by the kind of case)."""
        return FIRST_TOKEN_TEST_NAMES if len(self.tests_passed) == 1 else TEST_NAMES[:len(self.tests_passed)]

    @property
    def failed_tests(self) -> list[str]:
        """Names of the tests that failed (``TEST_NAMES``: joint outcome, law of τ, token given
        (τ, prefix), mean τ, and the coarsened law and the identity test on cases of six tests; a FirstTokenCase has the one first-token law test), from the
        decisions ``certify_case`` took (``tests_passed``): [] for a passing case."""
        return ([name for name, ok in zip(self.test_names, self.tests_passed) if not ok]
                + [name for name, ok, _ in self.checks if not ok])

    @property
    def failed_checks(self) -> list[tuple[str, str]]:
        """(name, detail) of each failed deterministic check (``checks``)."""
        return [(name, detail) for name, ok, detail in self.checks if not ok]

    @property
    def pvalues(self) -> tuple[float, ...]:
        """The p-values of the family's tests, in ``TEST_NAMES`` order (``n_tests`` of them;
        the first-token law's alone for a FirstTokenCase)."""
        if not self.tests_passed:  # the tests did not run (a failed "verifier output" check)
            return ()
        if len(self.tests_passed) == 1:
            return (self.pvalue_joint,)
        return (self.pvalue_joint, self.pvalue_tau, self.pvalue_conditional, self.pvalue_mean,
                self.pvalue_coarse, self.pvalue_identity)[: self.n_tests]

    @property
    def case_pvalue(self) -> float:
        """The case's Bonferroni p-value: min(1, number of tests × the smallest p-value); NaN when
        the tests did not run."""
        if not self.pvalues:
            return math.nan
        return min(1.0, len(self.pvalues) * min(self.pvalues))

    @property
    def verdict(self) -> str:
        return verdict_word(self.passed, self.expect_pass)

    @property
    def ok(self) -> bool:
        return self.passed == self.expect_pass


@dataclass
class CertificationReport:
    """All case results, the seed-contract checks (``oracle.seed_contract.SeedCheck``: "seed
    replay", "seed dependence", "batch independence") and the input probes
    (``oracle.input_probes.Probe``: impossible inputs refused; empty when not run); ``ok`` when
    every expected-pass case passes, every planted wrong case fails and every check and probe
    passes."""

    results: list[CaseResult] = field(default_factory=list)
    seed_checks: list = field(default_factory=list)
    probes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (all(r.ok for r in self.results) and all(c.passed for c in self.seed_checks)
                and all(p.passed for p in self.probes))

    def to_json(self) -> list[dict]:
        rows = []
        for r in self.results:
            d = asdict(r)
            d["verdict"] = r.verdict
            d["failed_tests"] = r.failed_tests
            d["tests_passed"] = list(r.tests_passed)
            d["checks"] = [{"check": n, "passed": ok, "detail": det} for n, ok, det in r.checks]
            d["mean_ci"] = list(r.mean_ci)
            d["worst_cells"] = [{"outcome": repr(o), "observed": obs, "expected": exp}
                                for o, obs, exp in r.worst_cells]
            rows.append(d)
        return (rows + [c.to_json() for c in self.seed_checks]
                + [{"probe": p.name, "kind": "input probe", "passed": p.passed, "detail": p.detail,
                    "verdict": verdict_word(p.passed)} for p in self.probes])

    def table(self) -> str:
        """A fixed-width table (markdown-compatible): per case its sizes, N, α, the detectable
        TV δ and the measured TV (``CaseResult.empirical_tv``), the smallest of its p-values, the
        tests that failed (``CaseResult.failed_tests``; "—" when none), mean τ against the exact
        E[τ], and the verdict; the failed deterministic checks with their reasons; then the seed
        checks' table (``oracle.seed_contract.seed_table``) and the input probes'.  ``to_json``
        lists the cases, then the seed checks (their ``check`` key names them), then the probes
        (``probe``)."""
        head = ("| case | rule | V | K | L | dtype | N | α | detectable TV | measured TV | min p | failed tests "
                "| mean τ | exact E[τ] | verdict |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        lines = [head]
        for r in self.results:
            pmin = min(r.pvalues) if r.pvalues else math.nan
            failed = ", ".join(r.failed_tests) or "—"
            lines.append(
                f"| {r.name} | {r.rule} | {r.V} | {r.K} | {r.L} | {r.dtype} | {r.n} | {r.alpha:g} | "
                f"{r.detectable_tv:.4f} | {r.empirical_tv:.4f} | {pmin:.3g} | {failed} | {r.mean_tau:.4f} | "
                f"{r.exact_mean_tau:.4f} | {r.verdict} |")
        details = [f"- {r.name}: {name}: {detail}" for r in self.results for name, detail in r.failed_checks]
        if details:
            lines += ["", "Failed checks:"] + details
        if self.seed_checks:
            from spectr_gbv.oracle.seed_contract import seed_table

            lines += ["", seed_table(self.seed_checks)]
        if self.probes:
            lines += ["", "| input probe | verdict | detail |", "|---|---|---|"]
            lines += [f"| {p.name} | {verdict_word(p.passed)} | {p.detail} |" for p in self.probes]
        return "\n".join(lines)


WORST_CELLS = 3


def worst_cells(samples, law: dict, k: int = WORST_CELLS) -> tuple:
    """The ``k`` outcomes whose counts deviate most from ``law`` (see ``CaseResult``).

    Args:
        samples: iterable of hashable outcomes.  law: outcome → probability.
    Returns:
        tuple of (outcome, observed int, expected float), largest |O − E|/√E first.
    """
    counts = counts_from_samples(samples)
    n = sum(counts.values())

    def score(o):
        e = n * law.get(o, 0.0)
        return math.inf if e == 0 else abs(counts.get(o, 0) - e) / math.sqrt(e)

    cells = sorted(set(counts) | {o for o, p in law.items() if p > 0}, key=score, reverse=True)
    return tuple((o, int(counts.get(o, 0)), n * law.get(o, 0.0)) for o in cells[:k])


def empirical_tv(samples, law: dict) -> float:
    """½ Σ_o |count(o)/N − law(o)| over observed and possible outcomes (see ``CaseResult``)."""
    counts = counts_from_samples(samples)
    n = sum(counts.values())
    return 0.5 * sum(abs(counts.get(o, 0) / n - law.get(o, 0.0)) for o in set(counts) | set(law))


def verdict_outcomes(tau: np.ndarray, tokens: np.ndarray, L: int, V: int) -> list[Outcome]:
    """(τ, accepted prefix, emitted token) of each row of one call.

    Raises:
        ContractViolation: tokens not [B, L+1], τ not [B] or outside [0, L], an emitted token id
            (accepted or last) outside [0, V).
    """
    tau = np.asarray(tau).astype(np.int64, casting="unsafe").reshape(-1)
    tokens = np.asarray(tokens).astype(np.int64, casting="unsafe")
    if tokens.ndim != 2 or tokens.shape != (len(tau), L + 1):
        raise ContractViolation(f"verifier returned tokens of shape {tokens.shape} with tau of shape {tau.shape}, "
                                f"expected [B, {L + 1}] and [B]")
    if np.any((tau < 0) | (tau > L)):
        b = int(np.flatnonzero((tau < 0) | (tau > L))[0])
        raise ContractViolation(f"verifier returned tau = {int(tau[b])} outside [0, {L}] (batch row {b})")
    emitted = np.arange(L + 1)[None, :] <= tau[:, None]
    bad = emitted & ((tokens < 0) | (tokens >= V))
    if bad.any():
        b = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ContractViolation(f"verifier emitted a token id outside [0, {V}) (batch row {b}: tau {int(tau[b])}, "
                                f"tokens {tokens[b].tolist()})")
    emitted = tokens[np.arange(len(tau)), tau]
    return [(int(t), tuple(int(x) for x in row[:t]), int(e)) for t, row, e in zip(tau, tokens, emitted)]


def draft_table(draft: ToyModel, target: ToyModel, K: int, L: int):
    """Every single-draft block of positive probability with its verifier rows."""
    dec = Decoder(draft, target, K, L)
    state = DecodeState()
    paths = draft_paths(dec, state)
    probs = np.array([pr for _, pr in paths])
    toks = np.empty((len(paths), L), dtype=np.int64)
    dps = np.empty((len(paths), L, dec.V))
    tps = np.empty((len(paths), L + 1, dec.V))
    for j, (block, _) in enumerate(paths):
        t, d, q = dec.block_inputs(state, [block])
        toks[j], dps[j], tps[j] = t[0], d[0], q[0]
    return probs / probs.sum(), toks, dps, tps


# Exact laws carry float64 rounding (Σ = 1 ± 1e-15): a variance floor keeps a deterministic τ
# from failing the mean test on that rounding, while any real deviation (≥ 1/N) still fails.
MEAN_VARIANCE_FLOOR = 1e-18


def outcome_tau(outcome: Outcome) -> int:
    """τ of an outcome (τ, accepted prefix, emitted token)."""
    return outcome[0]


def family_size(law: dict) -> int:
    """The number of tests of a fixed case with this exact law: 6 (the coarsened test and the
    identity test of oracle.identity added) when more than ``COARSE_BINS`` outcomes have positive
    probability, else 4.  It depends on the law only, so Bonferroni at α/family_size holds."""
    return 6 if sum(1 for p in law.values() if p > 0.0) > COARSE_BINS else 4


@dataclass(frozen=True)
class _LargeLawTests:
    """The tests a case of more than ``COARSE_BINS`` outcomes adds: the coarsened G-test
    (oracle.coarsen) and the identity test on the whole law (oracle.identity)."""

    coarse: object
    identity: object

    @property
    def passed(self) -> bool:
        return self.coarse.passed and self.identity.passed

    @property
    def decisions(self) -> tuple[bool, bool]:
        return (self.coarse.passed, self.identity.passed)


def _family(samples: list[Outcome], law: dict, alpha: float, exact_mean: float, exact_var: float):
    """(joint, law of τ, conditional, mean, the large-law tests or None, n_tests), each at
    α/n_tests."""
    n_tests = family_size(law)
    a = alpha / n_tests
    exact_var = max(exact_var, MEAN_VARIANCE_FLOOR)
    counts = counts_from_samples(samples)
    joint = gtest(counts, law, a)
    tau_law = gtest(counts_from_samples(o[0] for o in samples), law_of(law, outcome_tau), a)
    cond = conditional_gtests(samples, law, lambda o: (o[0], o[1]), a)
    mean = mean_within_ci([o[0] for o in samples], exact_mean, a, exact_variance=exact_var)
    coarse = (_LargeLawTests(coarse_gtest(counts, law, a, group=outcome_tau), identity_test(counts, law, a))
              if n_tests == 6 else None)
    return joint, tau_law, cond, mean, coarse, n_tests


@dataclass(frozen=True)
class CasePower:
    """What a fixed case states at N before sampling (``case_power``).

    Attributes: n_tests (4 or 6), alpha_per_test, joint (``oracle.gtest_power.GTestPower`` of the
    joint G-test: cells, pooled mass; ``joint.detectable_tv_law`` is ``CaseResult.detectable_tv``
    with no count on the rare cells), coarse (the coarsened test's, None with 4 tests;
    ``coarse.detectable_tv_law`` is ``CaseResult.detectable_tv_coarse``), identity
    (``oracle.identity.IdentityPower``, None with 4 tests; its ``detectable_tv`` is
    ``CaseResult.detectable_tv_identity``).
    """

    n_tests: int
    alpha_per_test: float
    joint: GTestPower
    coarse: GTestPower | None
    identity: IdentityPower | None = None

    @property
    def detectable_tv(self) -> float:
        return self.joint.detectable_tv_law


def case_power(case: FixedCase, n_samples: int, alpha: float = 1e-6) -> CasePower:
    """The δ's ``certify_case(…, case, n_samples, alpha)`` states, from the case's exact law
    and the pooling rule alone (no sampling): the same family size, α per test, pooling
    (``gtest_power``) and bins (``coarse_power``) as ``certify_case``, at its N
    (min(n_samples, case.samples_cap)).

    Raises:
        TypeError: not a FixedCase.  ValueError: as ``gtest_power``.
    """
    if not isinstance(case, FixedCase):
        raise TypeError(f"case must be a FixedCase, got {type(case).__name__}")
    if case.samples_cap is not None:
        n_samples = min(int(n_samples), int(case.samples_cap))
    law = exact_verdict_law(get_rule(case.reference_rule), case.draft_tokens, case.draft_probs,
                            case.target_probs)
    n_tests = family_size(law)
    a = alpha / n_tests
    coarse = coarse_power(law, n_samples, a, group=outcome_tau) if n_tests == 6 else None
    identity = identity_power(law, n_samples, a) if n_tests == 6 else None
    return CasePower(n_tests, a, gtest_power(law, n_samples, a), coarse, identity)


def chunk_seeds(seed: int, chunk_index: int, B: int, case: int = 0) -> np.ndarray:
    """int64 [B] in [0, 2^63): the per-row seeds of call ``chunk_index`` of case ``case`` of a run
    at base seed ``seed``, ``oracle.seeding.CaseSeeds(seed, case).row_seeds(chunk_index, B)``:
    hashed per (seed, case, call, row) by ``numpy.random.SeedSequence``, so rows, calls, cases
    and nearby base seeds get unrelated seeds (oracle/seeding.py).

    Raises:
        ValueError: seed not an integer; chunk_index, B or case not an integer ≥ 0.
    """
    return CaseSeeds(seed, case).row_seeds(chunk_index, B)


def call_verifier(verifier, draft_tokens, draft_probs, target_probs, seeds):
    """One call of the batched contract (reference/contract.py): (τ int [B], tokens int [B, L+1])
    as numpy arrays."""
    out = verifier(draft_tokens, draft_probs, target_probs, seeds=seeds)
    return to_numpy(out.tau), to_numpy(out.tokens)


def verifier_for(verifier, case):
    """The verifier of ``case``: ``verifier`` itself, or ``verifier[case.rule]`` for a mapping
    from rule names to verifiers (several rules certified in one call).

    Raises:
        KeyError: a mapping without ``case.rule``.
        TypeError: ``verifier`` is not callable.
    """
    if isinstance(verifier, Mapping):
        if case.rule not in verifier:
            raise KeyError(f"no verifier for rule {case.rule!r} (have {sorted(verifier)})")
        verifier = verifier[case.rule]
    if not callable(verifier):
        raise TypeError(f"verifier must be callable with the batched contract, got {type(verifier).__name__}")
    return verifier


def certify_case(verifier, case, n_samples: int = DEFAULT_SAMPLES, alpha: float = DEFAULT_ALPHA,
                 chunk: int = 4096, seed: int = 0, case_index: int = 0) -> CaseResult:
    """Run one case: ``n_samples`` outcomes from ``verifier`` in chunks, then the test family.

    Args:
        verifier: any object with the batched contract (module doc), or a mapping from rule
            names to such objects (``case.rule`` is looked up).
        case: FixedCase or FirstTokenCase.
        n_samples: N ≥ 2 (default ``oracle.defaults.DEFAULT_SAMPLES``); a FixedCase with a
            ``samples_cap`` runs at min(N, samples_cap).  alpha: case-level false-alarm rate in
            (0, 1).  chunk: rows per call, ≥ 1 (capped by ``rows_per_call``).
        seed: base seed.  case_index: the case's index in its run (≥ 0).  Call c gets the row
            seeds ``chunk_seeds(seed, c, B, case_index)`` and a fresh-draft case draws its drafts
            from ``CaseSeeds(seed, case_index).draft_rng()`` (oracle/seeding.py).
    Returns:
        CaseResult.  A verifier that raises, or returns outputs that break the contract (τ
        outside [0, L], token ids outside [0, V), wrong shapes), ends the case's sampling: the
        result fails its "verifier output" check with the error as its detail (a verdict, not
        an exception).  For a rule that modifies later targets, every sampled row's Algorithm 2
        record is checked (``oracle.record_check``: the "Algorithm 2 record" check).
    Raises:
        ValueError: n_samples < 2 or chunk < 1 (the caller's arguments).
        TypeError: not a FixedCase or FirstTokenCase.
    """
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2 (the mean test needs two), got {n_samples!r}")
    if isinstance(chunk, bool) or int(chunk) != chunk or chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
    verifier = verifier_for(verifier, case)
    start = time.perf_counter()
    seeds = CaseSeeds(seed, case_index)
    rng = seeds.draft_rng()
    samples: list[Outcome] = []
    done, c = 0, 0
    if isinstance(case, FixedCase):
        if case.samples_cap is not None:
            n_samples = min(int(n_samples), int(case.samples_cap))
        rule = get_rule(case.reference_rule)
        law = exact_verdict_law(rule, case.draft_tokens, case.draft_probs, case.target_probs)
        records = RecordCheck(rule, case) if modifies_targets(rule) else None
        kind = "fixed drafts vs exact law"
        K, L = case.K, case.L
        arrays = (case.draft_tokens, case.backend_draft_probs, case.backend_target_probs)
        chunk = rows_per_call(chunk, K, L, case.V)
        while done < n_samples:
            B = min(chunk, n_samples - done)
            batch = [np.broadcast_to(a, (B,) + a.shape) for a in arrays]
            try:
                out = verifier(*batch, seeds=seeds.row_seeds(c, B))
                outs = verdict_outcomes(to_numpy(out.tau), to_numpy(out.tokens), L, case.V)
            except Exception as err:  # a defect of the verifier: its verdict, not an exception
                return _stopped(case, kind, n_samples, alpha, done, c, err, start)
            if records is not None:
                records.add(getattr(out, "modification", None), outs)
            samples.extend(outs)
            done, c = done + B, c + 1
        checks = (("verifier output", True, f"{n_samples} rows in {c} calls, each within the contract"),)
        if records is not None:
            checks += (records.result(),)
        exact_mean = sum(pr * o[0] for o, pr in law.items())
        exact_var = sum(pr * (o[0] - exact_mean) ** 2 for o, pr in law.items())
        joint, tau_law, cond, mean, coarse, n_tests = _family(samples, law, alpha, exact_mean, exact_var)
        passed = (joint.passed and tau_law.passed and cond.passed and mean.passed
                  and (coarse is None or coarse.passed) and all(ok for _, ok, _ in checks))
        return CaseResult(
            case.name, case.rule, kind, case.expect_pass, n_samples, alpha, joint.detectable_tv_law,
            joint.pvalue, tau_law.pvalue, cond.pvalue, mean.pvalue, mean.mean, exact_mean,
            (mean.low, mean.high), len(joint.zero_cell_violations), passed,
            time.perf_counter() - start, case.V, K, L, case.backend_dtype, pooled_mass=joint.merged_mass,
            detectable_tv_pooled=joint.detectable_tv, worst_cells=worst_cells(samples, law),
            empirical_tv=empirical_tv(samples, law), **_coarse_fields(coarse, n_tests),
            tests_passed=(joint.passed, tau_law.passed, cond.passed, mean.passed)
            + (() if coarse is None else coarse.decisions), checks=checks)

    if isinstance(case, FirstTokenCase):
        kind = "fresh drafts, first token vs target"
        probs, toks, dps, tps = draft_table(case.draft, case.target, case.K, case.L)
        dt = np.float64 if case.backend_dtype == "float64" else np.float32
        dps, tps = dps.astype(dt), tps.astype(dt)
        firsts: list[int] = []
        taus: list[int] = []
        while done < n_samples:
            B = min(chunk, n_samples - done)
            idx = rng.choice(len(probs), size=(B, case.K), p=probs)
            try:
                tau, tokens = call_verifier(verifier, toks[idx], dps[idx], tps[idx], seeds.row_seeds(c, B))
                outs = verdict_outcomes(tau, tokens, case.L, case.V)
            except Exception as err:  # a defect of the verifier: its verdict, not an exception
                return _stopped(case, kind, n_samples, alpha, done, c, err, start)
            firsts.extend(o[1][0] if o[0] > 0 else o[2] for o in outs)
            taus.extend(o[0] for o in outs)
            done, c = done + B, c + 1
        target_first = {x: float(p) for x, p in enumerate(case.target.conditional(())) if p > 0}
        test = gtest(counts_from_samples(firsts), target_first, alpha)
        return CaseResult(
            case.name, case.rule, kind, case.expect_pass, n_samples, alpha, test.detectable_tv_law,
            test.pvalue, 1.0, 1.0, 1.0, float(np.mean(taus)), math.nan, (math.nan, math.nan),
            len(test.zero_cell_violations), test.passed, time.perf_counter() - start,
            case.V, case.K, case.L, case.backend_dtype, notes="law of the first emitted token only",
            pooled_mass=test.merged_mass, detectable_tv_pooled=test.detectable_tv,
            worst_cells=worst_cells(firsts, target_first), empirical_tv=empirical_tv(firsts, target_first),
            tests_passed=(test.passed,),
            checks=(("verifier output", True, f"{n_samples} rows in {c} calls, each within the contract"),))
    raise TypeError(f"case must be a FixedCase or FirstTokenCase, got {type(case).__name__}")


# A call hands the verifier at most this many probabilities (B·K·(2L + 1)·V, the draft and target
# rows): 2^27 (1 GiB of float64), so a case of a real vocabulary (V = 151,936) is sent in calls of
# 126 rows at K = 1, L = 3 instead of ``chunk`` rows a verifier would copy into 35 GB.  At V = 4,096
# the cap binds above K·(2L + 1) = 8 (K = 2, L = 3: calls of 2,340 rows instead of 4,096).
CALL_PROBABILITIES = 2**27


def rows_per_call(chunk: int, K: int, L: int, V: int) -> int:
    """``chunk``, capped so that one call's rows hold at most ``CALL_PROBABILITIES``
    probabilities (K·(2L + 1)·V per row); at least 1."""
    return max(1, min(int(chunk), CALL_PROBABILITIES // (K * (2 * L + 1) * V)))


def _stopped(case, kind: str, n_samples: int, alpha: float, done: int, call: int, err: Exception,
             start: float) -> CaseResult:
    """The CaseResult of a case whose verifier raised, or broke the contract's outputs, on call
    ``call`` after ``done`` rows: its "verifier output" check failed with the error; the
    statistical tests did not run (their fields NaN)."""
    why = "broke the contract" if isinstance(err, ContractViolation) else "raised"
    detail = (f"the verifier {why} on call {call} (after {done} of {n_samples} rows): "
              f"{type(err).__name__}: {err}")
    nan = math.nan
    return CaseResult(case.name, case.rule, kind, case.expect_pass, n_samples, alpha, nan, nan, nan, nan, nan,
                      nan, nan, (nan, nan), 0, False, time.perf_counter() - start, case.V, case.K, case.L,
                      case.backend_dtype, notes=f"sampling stopped after {done} of {n_samples} rows",
                      n_tests=0, checks=(("verifier output", False, detail),))


def _coarse_fields(large, n_tests: int) -> dict:
    """CaseResult's n_tests, coarsened-test and identity-test fields (``_LargeLawTests``)."""
    if large is None:
        return {"n_tests": n_tests}
    coarse, ident = large.coarse, large.identity
    return {"n_tests": n_tests, "pvalue_coarse": coarse.pvalue,
            "detectable_tv_coarse": coarse.detectable_tv, "coarse_bins": coarse.bins.n_bins,
            "pvalue_identity": ident.pvalue, "detectable_tv_identity": ident.detectable_tv,
            "identity_tail_mass": ident.tail_mass}


def certify(verifier, cases: Sequence, n_samples: int = DEFAULT_SAMPLES, alpha: float = DEFAULT_ALPHA,
            chunk: int = 4096, seed: int = 0, progress: Callable[[CaseResult], None] | None = None
            ) -> CertificationReport:
    """Certify ``verifier`` (one object with the batched contract, or a mapping rule name →
    verifier) on ``cases`` (see ``certify_case``; case j runs with ``case_index=j``, so its seeds
    are unrelated to every other case's and run's); ``progress`` is called after each case.
    After the cases, each verifier's seed contract is checked (replay, seed dependence, batch
    independence: ``certification_seed_checks``) into ``report.seed_checks``."""
    cases = list(cases)
    report = CertificationReport()
    for j, case in enumerate(cases):
        result = certify_case(verifier, case, n_samples, alpha, chunk, seed, case_index=j)
        report.results.append(result)
        if progress is not None:
            progress(result)
    report.seed_checks = certification_seed_checks(verifier, cases, seed)
    return report


def certification_seed_checks(verifier, cases, seed: int) -> list[SeedCheck]:
    """The seed checks of ``certify(verifier, cases, seed=seed)`` (``oracle.seed_contract``): per distinct
    verifier (one, or one per rule of a mapping), three checks (``oracle.seed_contract``'s module doc) on the rows of one of
    its cases: the expected-pass ``FixedCase`` of smallest V (first in order among equals) whose
    exact law allows a batch of ≤ ``MAX_CHECK_ROWS`` rows, broadcast to B rows as the
    certification sends them; else the first case's rows (B = ``UNKNOWN_LAW_ROWS``; a
    ``FirstTokenCase``'s drafts from ``CaseSeeds(seed, j).check_rng()``).  Seeds:
    ``CaseSeeds(seed, j).check_seeds(B)`` and ``check_seeds(B, fresh=True)``, j the case's index.

    Returns:
        list of SeedCheck (empty when ``cases`` is empty).
    """
    groups: dict[int, list] = {}
    for j, case in enumerate(cases):
        groups.setdefault(id(verifier_for(verifier, case)), []).append((j, case))
    multi = len(groups) > 1
    checks: list[SeedCheck] = []
    for members in groups.values():
        v = verifier_for(verifier, members[0][1])
        pool = [m for m in members if m[1].expect_pass] or members
        chosen, collision, B = pool[0], None, UNKNOWN_LAW_ROWS
        fixed = sorted((m for m in pool if isinstance(m[1], FixedCase)), key=lambda m: m[1].V)
        fallback = None
        for j, case in fixed:
            law = exact_verdict_law(get_rule(case.reference_rule), case.draft_tokens, case.draft_probs,
                                    case.target_probs)
            c = collision_probability(law)
            need = rows_needed(c)
            if need is not None:
                chosen, collision, B = (j, case), c, need
                break
            if fallback is None or c < fallback[1]:
                fallback = ((j, case), c)
        else:
            if fallback is not None:  # near-deterministic everywhere: the least so, replay-as-fresh only
                chosen, collision, B = fallback[0], fallback[1], REPLAY_ROWS
        j, case = chosen
        seeds = CaseSeeds(seed, j)
        if isinstance(case, FixedCase):
            arrays = (case.draft_tokens, case.backend_draft_probs, case.backend_target_probs)
            rows = [np.broadcast_to(a, (B,) + a.shape) for a in arrays]
        elif isinstance(case, FirstTokenCase):
            probs, toks, dps, tps = draft_table(case.draft, case.target, case.K, case.L)
            dt = np.float64 if case.backend_dtype == "float64" else np.float32
            idx = seeds.check_rng().choice(len(probs), size=(B, case.K), p=probs)
            rows = [toks[idx], dps[idx].astype(dt), tps[idx].astype(dt)]
        else:
            raise TypeError(f"case must be a FixedCase or FirstTokenCase, got {type(case).__name__}")
        subject = (f"rule {case.rule}, " if multi else "") + f"case {case.name!r}"
        checks.extend(check_seed_contract(v, *rows, seeds.check_seeds(B), seeds.check_seeds(B, fresh=True),
                                          collision=collision, subject=subject))
    return checks
