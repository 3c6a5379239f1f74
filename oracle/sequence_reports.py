"""Tests of what a deployment *reports* beside its samples: its top-k lists and its sampled tokens'
log-probabilities.  They run beside the law tests of ``oracle.sequence_family`` and take their own
share of the certificate's α (``REPORT_SHARE``, taken from the family's per-position rows:
``family_test(reserved=...)``), so that the certificate's false-alarm rate stays at most α.

- **other cell** (``other_cell_test``): a top-k list whose "other" mass is ~0 within its reported
  precision (``oracle.sequence_records``: records with ``ox``) says the sampled token lies in the
  list with probability ≥ 1 − o_t.  A token sampled outside such a list is not impossible (the
  list's own precision allows it), but many of them say the lists are inconsistent with the
  samples.  Test by e-value: W = mean over λ ∈ ``OTHER_LAMBDAS`` of Π_t (1 − λ + λ·ox_t / o_t)
  over the flagged tokens; each factor has mean 1 − λ + λ·P(outside)/o_t ≤ 1 under the null
  (P(outside) ≤ o_t, o_t an upper bound on the true "other" mass), so W is a non-negative
  supermartingale and p = min(1, 1/W) is exact in size at every N (Ville's inequality; as
  ``oracle.sequence_scores``' e-value tests).  o_t = 0 with ox_t = 1 (a list that provably
  covers the law, a token outside it): W = ∞, p = 0.
"""

from __future__ import annotations

import math

import numpy as np

from spectr_gbv.oracle.inputs import check_alpha
from spectr_gbv.oracle.sequence_scores import DirectionalResult

# the share of the certificate's α the report tests take (split equally among those planned)
REPORT_SHARE = 1 / 16
# the other-cell e-value's mixture weights: one token outside a list whose other mass is o gives a
# factor λ/o, each token inside (1 − λ): small λ keep a run of inside tokens cheap
OTHER_LAMBDAS = (0.1, 0.01, 1e-3, 1e-4)


def other_cell_test(records, alpha: float) -> DirectionalResult | None:
    """The other-cell test (module doc) over the records flagged ``ox``.

    Args:
        records: per-token records (``oracle.sequence_records``), any number of sequences
            flattened.
        alpha: this test's false-alarm rate, in (0, 1).
    Returns:
        ``DirectionalResult`` named "reported top-k: other cell" (statistic log W; observed: tokens
        outside; expected: Σ o_t, the most the lists allow; n: flagged tokens), or None when no
        record is flagged (the test is not planned).
    Raises:
        ValueError: alpha out of range.
    Source: Ville 1939; Grünwald, de Heide & Koolen 2024 (safe testing), as the mixture tests.
    """
    alpha = check_alpha(alpha)
    flagged = [r for r in records if "ox" in r and not r.get("imp")]
    if not flagged:
        return None
    o = np.array([float(r["o"]) for r in flagged])
    out = np.array([int(r["ox"]) for r in flagged], dtype=bool)
    unit = "tokens outside (caught: 1)"
    if np.any(out & (o <= 0)):
        log_w = math.inf
    else:
        logs = []
        for lam in OTHER_LAMBDAS:
            f = np.where(out, np.log((1 - lam) + lam / np.where(o > 0, o, 1.0)), math.log1p(-lam))
            logs.append(float(f.sum()))
        top = max(logs)
        log_w = top + math.log(float(np.mean(np.exp(np.array(logs) - top))))
    p = 0.0 if log_w == math.inf else min(1.0, math.exp(-log_w)) if log_w < 700 else 0.0
    # caught: would one token outside the smallest-o list reject at this α (with the rest inside)?
    lam = OTHER_LAMBDAS[0]
    one = math.log((1 - lam) + lam / max(float(o.min()), 1e-300)) + (len(o) - 1) * math.log1p(-lam)
    return DirectionalResult("reported top-k: other cell", float(log_w), p, len(flagged), float(out.sum()),
                             float(o.sum()), float((o * (1 - o)).sum()), 0.0, alpha, 1,
                             float(one - math.log(len(OTHER_LAMBDAS)) >= math.log(1 / alpha)), unit, p >= alpha)


def report_tests(records, alpha: float) -> tuple:
    """The report tests a run plans and their results, each at ``alpha`` split equally among those
    planned (the other-cell test when any record is flagged).

    Args:
        records: the run's per-token records, flattened; alpha: the report tests' whole share.
    Returns:
        a tuple of ``DirectionalResult`` (empty when none is planned).
    """
    planned = [other_cell_test] if any("ox" in r for r in records) else []
    if not planned:
        return ()
    share = alpha / len(planned)
    return tuple(t(records, share) for t in planned)


def planned_share(records, alpha: float) -> float:
    """The part of α the report tests take for these records (0 when none is planned)."""
    return alpha * REPORT_SHARE if any("ox" in r for r in records) else 0.0
