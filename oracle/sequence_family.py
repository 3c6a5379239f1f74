"""The family of sequence tests a black-box certificate runs, and its multiplicity correction.

Input: N sampled sequences reduced to per-token records (``oracle.sequence_records``: from the
reference's whole laws or its top-k log-probabilities).  The family:

- **omnibus** (``OMNIBUS_SHARE`` = α/4): the randomized PIT of every token (``lo + U·c`` in
  probability order, ``li + U·c`` in id order, over the record's cells) tested for uniformity by
  Kolmogorov–Smirnov (``oracle.sequence_test.ks_uniform_test``, exact ``kstwo`` law, threshold
  raised by η) pooled over every token (α/8, shared by the two orders) and at each position (α/8,
  shared by the positions × orders);
- **directional** (3α/4, split equally among the planned tests): temperature, truncation,
  position shift, and draft leak when the draft's law is known (``oracle.sequence_scores``).

The directional tests get the larger share because at the sample sizes a user affords they carry
the power against the defects engines ship (benchmarks/SEQUENCE_POWER.md); the omnibus test stays,
at a quarter of α, for deviations no directional test knows.

Bonferroni over the whole family: its false-alarm rate is at most α (each test's own rate is
measured by simulation: tests/oracle/test_sequence_family.py, benchmarks/SEQUENCE_POWER.md).

The uniforms U of the PIT are drawn from ``numpy.random.default_rng([seed, i])`` for sample i,
so that a resumed run (samples in any order, some stored earlier) gives every token the same U;
``seed`` must be independent of the engine's randomness.

Samples may come from several prompts: every PIT is Uniform(0, 1) given its own past whatever
the prompt, and every score's mean and variance are its own token's, so pooling over prompts
needs no correction beyond the family's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spectr_gbv.oracle.inputs import check_alpha
from spectr_gbv.oracle.sequence_scores import (MIXTURES, DirectionalResult, mixture_test, temperature_test,
                                               truncation_test)
from spectr_gbv.oracle.sequence_test import ORDERS, SequenceRow, ks_uniform_test

DIRECTIONAL = ("temperature", "truncation", "position shift", "draft leak")
OMNIBUS_SHARE = 0.25  # of α; the directional tests share the rest


@dataclass(frozen=True)
class FamilyResult:
    """Result of ``family_test``.

    Attributes:
        rows: the omnibus KS rows (``SequenceRow``: scope "all" or "position j", order).
        directional: the directional results (``DirectionalResult``), in ``DIRECTIONAL`` order.
        alpha: the family's false-alarm rate; tolerance: η.
        n_sequences, n_tokens: sequences and tokens tested.
        early_stops: sequences shorter than the longest.
        impossible: tokens whose cell the reference gives probability 0 (each fails the family).
        coarsened: the smallest k of any record (V for whole laws): mass moved inside a top-k
            law's "other" cell is not seen.
        passed: every row and directional test passed and no impossible token.
        detectable: the pooled probability-order PIT deviation caught with power 0.99.
    """

    rows: tuple
    directional: tuple
    alpha: float
    tolerance: float
    n_sequences: int
    n_tokens: int
    early_stops: int
    impossible: int
    coarsened: int
    passed: bool
    detectable: float

    def pooled(self, order: str) -> SequenceRow:
        return next(r for r in self.rows if r.scope == "all" and r.order == order)

    def test(self, name: str) -> DirectionalResult | None:
        """The directional result whose name starts with ``name`` (None when not run)."""
        return next((d for d in self.directional if d.name.startswith(name)), None)

    def worst(self):
        """The row or directional result with the smallest p-value relative to its α."""
        return min(list(self.rows) + list(self.directional), key=lambda r: r.pvalue / r.alpha)


def record_pits(records, index: int, seed: int, order: str) -> np.ndarray:
    """The randomized PITs of one sequence's records (NaN at impossible tokens).

    Args:
        records: the sequence's records; index: its sample index (picks its uniforms);
        seed: the PIT stream's seed; order: "id" or "probability".
    Returns:
        float64 [len(records)].
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    u = np.random.default_rng([int(seed), int(index)]).random(len(records))
    key = "lo" if order == "probability" else "li"
    return np.array([math.nan if r.get("imp") or "c" not in r else min(1.0, r[key] + u[j] * r["c"])
                     for j, r in enumerate(records)], dtype=np.float64)


def planned_directional(draft_known: bool) -> tuple[str, ...]:
    """The directional tests a plan runs: all of ``DIRECTIONAL`` but draft leak unless the draft's
    law is known."""
    return tuple(d for d in DIRECTIONAL if d != "draft leak" or draft_known)


def family_test(samples, alpha: float = 1e-3, tolerance: float = 0.0, seed: int = 0, indices=None,
                directional=None, positions: bool = True, reserved: float = 0.0,
                directional_alpha: float | None = None) -> FamilyResult:
    """Run the family (module doc) on N sequences of records.

    Args:
        samples: N lists of per-token records (lengths may differ: early stops).
        alpha: the family's false-alarm rate, in (0, 1).
        tolerance: η in [0, 1).
        seed: the PIT uniforms' seed (module doc).
        indices: the samples' indices (default 0..N−1): sample i's uniforms depend on it alone.
        directional: the directional tests to run (default: ``planned_directional`` of whether
            any record carries the draft-leak score).  Their share 3α/4 is split among them.
        positions: also run the per-position KS rows.
        reserved: the part of α spent outside the family (the report tests of
            ``oracle.sequence_reports``), in [0, α/8): taken from the per-position rows' share (from
            the pooled rows' without positions); the directional shares do not change.
        directional_alpha: the α whose share (3/4, split equally) the directional tests take
            (default ``alpha``).  A sequential plan (``certify.endpoint.sequential``) passes its whole
            α at every look, where ``alpha`` is the look's spent share: each directional test is an
            e-value, valid at every look by Ville's inequality.
    Returns:
        ``FamilyResult``.
    Raises:
        ValueError: no sample, indices of the wrong length, unknown test names, bad α or η.
    """
    alpha = check_alpha(alpha)
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    eta = float(tolerance)
    samples = [list(s) for s in samples]
    if not samples:
        raise ValueError("samples must hold at least one sequence of records")
    indices = list(range(len(samples))) if indices is None else [int(i) for i in indices]
    if len(indices) != len(samples):
        raise ValueError(f"indices has {len(indices)} entries for {len(samples)} samples")
    flat = [r for s in samples for r in s]
    if directional is None:
        directional = planned_directional(any("de" in r for r in flat))
    unknown = [d for d in directional if d not in DIRECTIONAL]
    if unknown:
        raise ValueError(f"directional: unknown test(s) {unknown}; known: {DIRECTIONAL}")
    if not (0 <= float(reserved) < alpha * OMNIBUS_SHARE / 2):
        raise ValueError(f"reserved must be in [0, alpha/8), got {reserved!r}")
    a_omni = alpha * OMNIBUS_SHARE if directional else alpha
    lengths = [len(s) for s in samples]
    n_pos = max(lengths) if positions and lengths else 0
    a_pooled = a_omni / 2 / len(ORDERS) if n_pos else (a_omni - reserved) / len(ORDERS)
    a_pos = (a_omni / 2 - reserved) / (n_pos * len(ORDERS)) if n_pos else 0.0
    pits = {o: [record_pits(s, i, seed, o) for s, i in zip(samples, indices)] for o in ORDERS}
    # each token's tolerance: η plus its reported cells' precision (sequence_records: ``pe``); a KS
    # row takes the largest over its tokens
    prec = [np.array([r.get("pe", 0.0) for r in s], dtype=np.float64) for s in samples]
    impossible = sum(1 for r in flat if r.get("imp"))

    def row_eta(values) -> float:
        return min(0.999, eta + (float(values.max()) if values.size else 0.0))

    rows = []
    all_prec = np.concatenate(prec) if prec else np.zeros(0)
    for o in ORDERS:
        allu = np.concatenate(pits[o]) if pits[o] else np.zeros(0)
        r = ks_uniform_test(allu[~np.isnan(allu)], a_pooled, row_eta(all_prec))
        rows.append(SequenceRow("all", o, "KS", r.statistic, r.pvalue, r.n, a_pooled, r.detectable, r.passed))
    for j in range(n_pos):
        pj = np.array([p[j] for p in prec if len(p) > j])
        for o in ORDERS:
            u = np.array([p[j] for p in pits[o] if len(p) > j])
            r = ks_uniform_test(u[~np.isnan(u)], a_pos, row_eta(pj))
            rows.append(SequenceRow(f"position {j}", o, "KS", r.statistic, r.pvalue, r.n, a_pos,
                                    r.detectable, r.passed))
    a_full = alpha if directional_alpha is None else check_alpha(directional_alpha)
    a_dir = a_full * (1 - OMNIBUS_SHARE) / len(directional) if directional else 0.0

    def run(name):
        if name == "truncation":
            return truncation_test(flat, a_dir, eta)
        if name in MIXTURES:
            return mixture_test(flat, name, a_dir, eta)
        return temperature_test(flat, a_dir, eta)

    dirs = tuple(run(d) for d in directional)
    coarsened = min((int(r["k"]) for r in flat), default=0)
    passed = impossible == 0 and all(r.passed for r in rows) and all(d.passed for d in dirs)
    return FamilyResult(tuple(rows), dirs, alpha, eta, len(samples), int(sum(lengths)),
                        sum(n < max(lengths) for n in lengths), impossible, coarsened, passed,
                        next(r.detectable for r in rows if r.scope == "all" and r.order == "probability"))


@dataclass(frozen=True)
class PlanPower:
    """What a plan of ``n_tokens`` tokens detects with power 0.99 (``plan_power``).

    Attributes:
        n_tokens: tokens of the plan; alpha, tolerance: the family's.
        omnibus: the pooled PIT deviation d (per-token TV of a monotone deviation).
        temperature: |Δβ| (≈ |ΔT|/T), inf when the pilot carries no temperature score.
        position_shift, draft_leak: the weight ε of a stale-law or draft-law mixture (inf when not
            resolved or not planned).
        truncation: {level: caught (bool)}: a sampler truncating at that level (no token outside)
            is caught with certainty at this size (the truncation e-value's drift, per-token
            −log M minus the tolerance's penalty, reaches log(levels / (w₁·α))), for the levels the
            test mixes over (``sequence_scores.truncation_levels``).
        tokens_for_tv: the tokens at which the omnibus d reaches ``target_tv`` (None if above 10^8).
        target_tv: that target.
    """

    n_tokens: int
    alpha: float
    tolerance: float
    omnibus: float
    temperature: float
    position_shift: float
    draft_leak: float
    truncation: dict
    tokens_for_tv: int | None
    target_tv: float


def plan_power(pilot, n_tokens: int, alpha: float, tolerance: float = 0.0, draft_known: bool = False,
               positions: bool = True, n_positions: int = 16, target_tv: float = 0.02,
               power: float = 0.99) -> PlanPower:
    """The deviations a plan of ``n_tokens`` tokens detects, from a pilot's records.

    The pilot's per-token averages of each score's null variance, range and drift are scaled to
    ``n_tokens`` tokens (the statistics are sums over tokens), and each test's share of α is the
    family's (module doc).  The formulas are oracle.sequence_scores' (normal approximation, linear
    in the defect's size) and oracle.sequence_test.detectable_deviation (the omnibus test).

    Args:
        pilot: per-token records of a pilot run (any number of sequences, flattened).
        n_tokens: the plan's tokens (N × n); alpha, tolerance: the family's α and η.
        draft_known: the plan runs the draft-leak test; positions, n_positions: the per-position
            rows and their number (their share of α).
        target_tv: the omnibus resolution whose token count ``tokens_for_tv`` reports.
    Raises:
        ValueError: an empty pilot or n_tokens < 1.
    """
    from spectr_gbv.oracle.sequence_scores import (LEVELS, TRUNCATION_WEIGHTS, mixture_detectable, mixture_sums,
                                                   temperature_detectable, temperature_penalties, truncation_levels)
    from spectr_gbv.oracle.sequence_test import detectable_deviation

    recs = [r for r in pilot if not r.get("imp")]
    if not recs:
        raise ValueError("pilot: no record to scale from")
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be ≥ 1, got {n_tokens}")
    directional = planned_directional(draft_known)
    a_omni = alpha * OMNIBUS_SHARE
    a_pooled = a_omni / 2 / len(ORDERS) if positions else a_omni / len(ORDERS)
    a_dir = alpha * (1 - OMNIBUS_SHARE) / len(directional)

    def temperature():
        have = [r for r in recs if "tk" in r]
        if not have:
            return math.inf
        f = n_tokens / len(have)
        v = sum(r["tv"] for r in have) * f
        return temperature_detectable(v, temperature_penalties(have, tolerance) * f, a_dir, power)

    def mixture(key):
        n, _, m, v, q = mixture_sums(recs, key)
        if n == 0:
            return math.inf
        f = n_tokens / n
        return mixture_detectable(n_tokens, m * f, v * f, q * f, a_dir, tolerance, power)

    truncation = {}
    levels = truncation_levels(recs)
    need_t = math.log(len(levels) / (TRUNCATION_WEIGHTS[0] * a_dir)) if levels else math.inf
    have = [r for r in recs if "nu" in r]
    for i in levels:  # caught for sure: the e-value of a sampler with no token outside reaches 1/α
        M = np.array([max(1e-300, 1.0 - r["nu"][i][0]) for r in have])
        eta = tolerance + np.array([r.get("pe", 0.0) for r in have])
        drift = float((-np.log(M) - np.log1p(np.minimum(1.0, M + eta) / M - 1.0)).sum()) * n_tokens / max(1, len(have))
        truncation[LEVELS[i]] = bool(drift >= need_t)
    omnibus = detectable_deviation(int(n_tokens), a_pooled, tolerance)
    need = None
    lo, hi = 1, 10**8
    if detectable_deviation(hi, a_pooled, tolerance) <= target_tv:
        while lo < hi:
            mid = (lo + hi) // 2
            if detectable_deviation(mid, a_pooled, tolerance) <= target_tv:
                hi = mid
            else:
                lo = mid + 1
        need = lo
    return PlanPower(int(n_tokens), alpha, tolerance, omnibus, temperature(),
                     float(mixture("s")) if "position shift" in directional else math.inf,
                     float(mixture("d")) if draft_known else math.inf, truncation, need, target_tv)
