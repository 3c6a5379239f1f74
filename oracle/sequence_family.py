"""The family of sequence tests a black-box certificate runs, and its multiplicity correction.

Input: N sampled sequences reduced to per-token records (``oracle.sequence_records``: from the
reference's whole laws or its top-k log-probabilities).  The family:

- **omnibus** (α/2): the randomized PIT of every token (``lo + U·c`` in probability order,
  ``li + U·c`` in id order, over the record's cells) tested for uniformity by Kolmogorov–Smirnov
  (``oracle.sequence_test.ks_uniform_test``, exact ``kstwo`` law, threshold raised by η) pooled
  over every token (α/4, shared by the two orders) and at each position (α/4, shared by the
  positions × orders), as ``oracle.sequence_test`` does;
- **directional** (α/2, split equally among the planned tests): temperature, truncation, position
  shift, and draft leak when the draft's law is known (``oracle.sequence_scores``).

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
from spectr_gbv.oracle.sequence_scores import DirectionalResult, nucleus_test, score_test
from spectr_gbv.oracle.sequence_test import ORDERS, SequenceRow, ks_uniform_test

DIRECTIONAL = ("temperature", "truncation", "position shift", "draft leak")


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
    return np.array([math.nan if r.get("imp") else min(1.0, r[key] + u[j] * r["c"])
                     for j, r in enumerate(records)], dtype=np.float64)


def planned_directional(draft_known: bool) -> tuple[str, ...]:
    """The directional tests a plan runs: all of ``DIRECTIONAL`` but draft leak unless the draft's
    law is known."""
    return tuple(d for d in DIRECTIONAL if d != "draft leak" or draft_known)


def family_test(samples, alpha: float = 1e-3, tolerance: float = 0.0, seed: int = 0, indices=None,
                directional=None, positions: bool = True) -> FamilyResult:
    """Run the family (module doc) on N sequences of records.

    Args:
        samples: N lists of per-token records (lengths may differ: early stops).
        alpha: the family's false-alarm rate, in (0, 1).
        tolerance: η in [0, 1).
        seed: the PIT uniforms' seed (module doc).
        indices: the samples' indices (default 0..N−1): sample i's uniforms depend on it alone.
        directional: the directional tests to run (default: ``planned_directional`` of whether
            any record carries the draft-leak score).  Their share α/2 is split among them.
        positions: also run the per-position KS rows.
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
        directional = planned_directional(any("dg" in r for r in flat))
    unknown = [d for d in directional if d not in DIRECTIONAL]
    if unknown:
        raise ValueError(f"directional: unknown test(s) {unknown}; known: {DIRECTIONAL}")
    a_omni = alpha / 2 if directional else alpha
    lengths = [len(s) for s in samples]
    n_pos = max(lengths) if positions and lengths else 0
    a_pooled = a_omni / 2 / len(ORDERS) if n_pos else a_omni / len(ORDERS)
    a_pos = a_omni / 2 / (n_pos * len(ORDERS)) if n_pos else 0.0
    pits = {o: [record_pits(s, i, seed, o) for s, i in zip(samples, indices)] for o in ORDERS}
    impossible = sum(1 for r in flat if r.get("imp"))
    rows = []
    for o in ORDERS:
        allu = np.concatenate(pits[o]) if pits[o] else np.zeros(0)
        r = ks_uniform_test(allu[~np.isnan(allu)], a_pooled, eta)
        rows.append(SequenceRow("all", o, "KS", r.statistic, r.pvalue, r.n, a_pooled, r.detectable, r.passed))
    for j in range(n_pos):
        for o in ORDERS:
            u = np.array([p[j] for p in pits[o] if len(p) > j])
            r = ks_uniform_test(u[~np.isnan(u)], a_pos, eta)
            rows.append(SequenceRow(f"position {j}", o, "KS", r.statistic, r.pvalue, r.n, a_pos,
                                    r.detectable, r.passed))
    a_dir = alpha / 2 / len(directional) if directional else 0.0
    dirs = tuple(nucleus_test(flat, a_dir, eta) if d == "truncation" else score_test(flat, d, a_dir, eta)
                 for d in directional)
    coarsened = min((int(r["k"]) for r in flat), default=0)
    passed = impossible == 0 and all(r.passed for r in rows) and all(d.passed for d in dirs)
    return FamilyResult(tuple(rows), dirs, alpha, eta, len(samples), int(sum(lengths)),
                        sum(n < max(lengths) for n in lengths), impossible, coarsened, passed,
                        next(r.detectable for r in rows if r.scope == "all" and r.order == "probability"))
