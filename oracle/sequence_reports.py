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
- **log-prob shift** (``logprob_shift_test``): the engine's reported log-probability of each
  sampled token against the reference's, judged as a law rather than by a bound alone.  Numerics
  (bfloat16 kernels against a float32 reference: drift sd ~0.15 nats, mean ~0 on Qwen2.5-0.5B,
  docs/engines.md) move single gaps d_t = reported − reference both ways; a misreport (the
  log-probability of another law, step or temperature; a constant offset) moves most of them one
  way.  Null: given the past, each gap exceeds +τ with probability ≤ ½ and falls below −τ with
  probability ≤ ½ (the gaps' conditional median lies in [−τ, τ]; τ = ``Plan.logprob_shift``,
  default ``DEFAULT_SHIFT`` nats).  Then the count k₊ of gaps above τ is stochastically at most
  Binomial(n, ½) (a sequential coupling), so P(k₊ ≥ k) ≤ P(Bin(n, ½) ≥ k) exactly at every n, and
  the same for k₋; the two-sided p-value is 2·min of the two tails (a sign test: Dixon & Mood
  1946, J. Am. Stat. Assoc. 41:557–566).  No assumption on the noise's shape or scale: heavy tails
  and single outliers count once each.  A single wildly wrong report is the deterministic bound's
  (``certify.endpoint.run.LogprobCheck``), not this test's.
- **independence: shared prefixes** (``independence_test``): samples of one prompt, taken in index
  order.  When sample j's first t tokens equal those of earlier samples of its prompt, its token t
  has, under independence, the reference law at that very prefix, so the chance that it falls in a
  cell some earlier sample took after that prefix is π = Σ of those cells' probabilities (read from
  the earlier samples' records: the same law), exactly.  W = mean over λ ∈ ``SHARE_LAMBDAS`` of
  Π (1 − λ + λ·I/π') over such positions (I: it did; π' = min(1, π + η_t): the tolerance), an
  e-value exact at every N (Ville).  Samples that copy each other's prefixes (a cache keyed on a
  prefix, a seed shared by some requests) make I = 1 where π is small: the verdict then says
  "samples dependent", and the law tests — which assume independent samples — are read as
  conditional on it.  With a top-k reference, a token in "other" shares the cell "other".
"""

from __future__ import annotations

import math

import numpy as np

from spectr_gbv.oracle.inputs import check_alpha
from spectr_gbv.oracle.sequence_scores import DirectionalResult, e_value_p

# the share of the certificate's α the report tests take (split equally among those planned)
REPORT_SHARE = 1 / 16
# τ: the gaps' conditional median a deployment's numerics may move within (nats)
DEFAULT_SHIFT = 0.1
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
    p = e_value_p(log_w)
    # caught: would one token outside the smallest-o list reject at this α (with the rest inside)?
    lam = OTHER_LAMBDAS[0]
    one = math.log((1 - lam) + lam / max(float(o.min()), 1e-300)) + (len(o) - 1) * math.log1p(-lam)
    return DirectionalResult("reported top-k: other cell", float(log_w), p, len(flagged), float(out.sum()),
                             float(o.sum()), float((o * (1 - o)).sum()), 0.0, alpha, 1,
                             float(one - math.log(len(OTHER_LAMBDAS)) >= math.log(1 / alpha)), unit, p >= alpha)


def signed_gaps(reported, reference) -> list[float]:
    """reported − reference per token where both are known and finite (nats)."""
    if reported is None or reference is None:
        return []
    return [float(a) - float(b) for a, b in zip(reported, reference)
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]


def logprob_shift_test(gaps, alpha: float, shift: float = DEFAULT_SHIFT,
                       power: float = 0.99) -> DirectionalResult | None:
    """The sign test of the reported log-probabilities (module doc).

    Args:
        gaps: signed gaps reported − reference (nats), one per token (``signed_gaps``).
        alpha: this test's false-alarm rate, in (0, 1).
        shift: τ ≥ 0, the numerics' allowance on the gaps' median (nats).
        power: the power at which ``detectable`` is stated.
    Returns:
        ``DirectionalResult`` named "reported log-probs: shift" (statistic: the sign statistic
        (k₊ − k₋)/√(k₊ + k₋), positive when the reports run high; observed: the deciding side's count
        k₊ or k₋; expected: n/2,
        the most the null allows; detectable: the systematic shift s (nats) caught with power
        ``power`` if the gaps are s + noise of the gaps' own robust scale, 1.4826·MAD), or None
        with no gap (the engine reports no log-probabilities).
    Raises:
        ValueError: alpha, power out of range or shift < 0.
    Source: the sign test (Dixon & Mood 1946); the binomial tails are scipy.stats.binom's, exact.
    """
    from scipy import stats as sps

    alpha = check_alpha(alpha)
    power = check_alpha(power, "power")
    if not (isinstance(shift, (int, float)) and shift >= 0 and math.isfinite(shift)):
        raise ValueError(f"shift must be a finite number ≥ 0, got {shift!r}")
    d = np.asarray([g for g in gaps if math.isfinite(g)], dtype=np.float64)
    n = int(d.size)
    if n == 0:
        return None
    above, below = int((d > shift).sum()), int((d < -shift).sum())
    p_above = float(sps.binom.sf(above - 1, n, 0.5))
    p_below = float(sps.binom.sf(below - 1, n, 0.5))
    p = min(1.0, 2 * min(p_above, p_below))
    k = above if p_above <= p_below else below
    z = (above - below) / math.sqrt(max(1, above + below))
    # detectable: k_crit the smallest count rejected; q the exceedance rate reaching it with the
    # power asked; s = τ + σ·Φ⁻¹(q) for gaps s + noise of scale σ
    k_crit = int(sps.binom.isf(alpha / 2, n, 0.5)) + 1
    while k_crit > 0 and 2 * sps.binom.sf(k_crit - 2, n, 0.5) <= alpha:
        k_crit -= 1
    det = math.inf
    if k_crit <= n:
        lo, hi = 0.5, 1.0
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if sps.binom.sf(k_crit - 1, n, mid) >= power else (mid, hi)
        sigma = 1.4826 * float(np.median(np.abs(d - np.median(d))))
        det = shift + sigma * float(sps.norm.ppf(min(hi, 1 - 1e-12)))
    return DirectionalResult("reported log-probs: shift", float(z), p, n, float(k), n / 2, n / 4, float(shift),
                             alpha, 0, float(det), "nats (systematic shift)", p >= alpha)


SHARE_LAMBDAS = (0.5, 0.1, 0.02)
INDEPENDENCE = "independence: shared prefixes"


def _cell(rec) -> object:
    """The record's cell: its token id, or "other" for a token in a top-k law's "other" cell (records
    written before ``oc`` existed key such a token by its id: the event "the same token" has
    probability at most the cell's, so the test stays valid)."""
    return "other" if rec.get("oc") else int(rec["x"])


def independence_test(samples, groups, alpha: float, tolerance: float = 0.0) -> DirectionalResult | None:
    """The shared-prefix test of independence (module doc).

    Args:
        samples: the samples' record lists, in sample-index order; groups: each sample's prompt (any
            hashable: samples of different prompts are never compared); alpha: this test's
            false-alarm rate; tolerance: η (each position's π' adds η + its cells' precision).
    Returns:
        ``DirectionalResult`` named ``INDEPENDENCE`` (statistic log W; observed: positions whose
        token fell in a cell an earlier sample took after the same prefix; expected: Σ π', the most
        independence allows; n: positions with π' < 1 compared), or None when no prompt has two
        samples (the test is not planned).
    Raises:
        ValueError: samples and groups of different lengths; alpha or tolerance out of range.
    """
    alpha = check_alpha(alpha)
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    samples, groups = list(samples), list(groups)
    if len(samples) != len(groups):
        raise ValueError(f"{len(samples)} samples for {len(groups)} groups")
    counts: dict = {}
    for g in groups:
        counts[g] = counts.get(g, 0) + 1
    if not counts or max(counts.values()) < 2:
        return None
    tries: dict = {}
    hits, pis = [], []
    for recs, grp in zip(samples, groups):
        trie = tries.setdefault(grp, {})
        prefix: tuple = ()
        for r in recs:
            seen = trie.get(prefix)
            if seen and not r.get("imp") and "c" in r:
                pi = min(1.0, sum(seen.values()) + float(tolerance) + r.get("pe", 0.0))
                if pi < 1.0:
                    hits.append(_cell(r) in seen)
                    pis.append(pi)
            prefix += (int(r["x"]),)
        prefix = ()
        for r in recs:  # this sample's cells join the prefixes it followed, for the samples after it
            if not r.get("imp") and "c" in r:
                trie.setdefault(prefix, {}).setdefault(_cell(r), float(r["c"]))
            prefix += (int(r["x"]),)
    unit = "positions sharing a cell (caught: 1)"
    if not pis:
        return DirectionalResult(INDEPENDENCE, 0.0, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, 1, 0.0, unit, True)
    I, P = np.asarray(hits, dtype=bool), np.asarray(pis)
    logs = [float(np.log(np.where(I, (1 - lam) + lam / P, 1 - lam)).sum()) for lam in SHARE_LAMBDAS]
    top = max(logs)
    log_w = top + math.log(float(np.mean(np.exp(np.array(logs) - top))))
    p = e_value_p(log_w)
    return DirectionalResult(INDEPENDENCE, float(log_w), p, int(P.size), float(I.sum()), float(P.sum()),
                             float((P * (1 - P)).sum()), 0.0, alpha, 1, 0.0, unit, p >= alpha)


def report_tests(records, alpha: float, gaps=None, shift: float = DEFAULT_SHIFT, samples=None, groups=None,
                 tolerance: float = 0.0) -> tuple:
    """The tests beside the law family a run plans and their results, each at ``alpha`` split
    equally among those planned: the other-cell test when any record is flagged, the log-prob shift
    test when any gap is known, the independence test when ``samples`` and ``groups`` are given and
    a prompt has two samples.

    Args:
        records: the run's per-token records, flattened; alpha: these tests' whole share;
        gaps: signed gaps reported − reference (``signed_gaps``), or None; shift: τ;
        samples, groups: the samples' record lists in index order and their prompts (or None);
        tolerance: η (the independence test's).
    Returns:
        a tuple of ``DirectionalResult`` (empty when none is planned).
    """
    planned = _planned(records, gaps, groups)
    if not planned:
        return ()
    share = alpha / len(planned)
    out = []
    for name in planned:
        if name == "other cell":
            out.append(other_cell_test(records, share))
        elif name == "log-prob shift":
            out.append(logprob_shift_test(gaps, share, shift))
        else:
            out.append(independence_test(samples, groups, share, tolerance))
    return tuple(out)


def _planned(records, gaps, groups=None) -> list[str]:
    planned = ["other cell"] if any("ox" in r for r in records) else []
    if gaps is not None and any(math.isfinite(g) for g in gaps):
        planned.append("log-prob shift")
    if groups is not None and len(groups) > len(set(groups)):
        planned.append("independence")
    return planned


def planned_share(records, alpha: float, gaps=None, groups=None) -> float:
    """The part of α the tests beside the family take for these records, gaps and prompt groups
    (0 when none is planned)."""
    return alpha * REPORT_SHARE if _planned(records, gaps, groups) else 0.0
