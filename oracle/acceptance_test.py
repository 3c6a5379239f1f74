"""Black-box test of an engine's draft acceptances against the target's law.

An engine that drafts tokens and keeps a draft token only when it equals its own sample from the
target (llama-cpp-python's and vLLM's n-gram speculation, transformers' prompt lookup: "exact
match" verification of a deterministic draft) accepts a draft token d at a position with
probability exactly p(d), the target's processed law at that position given the emitted prefix.
So the accepted count the engine reports is itself testable against the target's law.

The test
--------
Emitted positions j of a sampled sequence are visited by at most one draft: a draft proposed
after emitted token s−1 covers positions s, s+1, … until its first rejected token (or the
sequence's end).  At each visited position let A_j = 1 when the emitted token equals the draft
token d_j and p_j = p(d_j) under the reference law of position j.  The draft is a function of the
past and whether position j is visited depends on the past only, so under the null the
increments A_j − p_j are martingale differences (E[A_j | past] = p_j) with conditional variance
p_j(1 − p_j); summed over all visited positions of N independent sequences,

    z = (S − E) / √V,   S = Σ A_j,   E = Σ p_j,   V = Σ p_j (1 − p_j),

is asymptotically N(0, 1) (martingale CLT, self-normalised: Hall & Heyde 1980, Martingale Limit
Theory and Its Application, Cor. 3.1).  Two-sided: a draft kept when it differs raises S; a
penalty or a temperature on one side moves it either way.  The normal approximation's real
false-alarm rate is measured by simulation from exact laws in tests/oracle/test_acceptance_test.py.

Float rounding: the engine's kernels give each acceptance probability within η of p_j (it is
one cell of two laws within TV η), so E may be off by η per visited position: the test rejects
when |S − E| − η·n > z_{1−α/2}·√V (n visited positions).  A draft accepted where the reference
gives it probability 0 fails outright (``impossible``).

Power (normal approximation): a defect that shifts the mean acceptance probability per visited
position by δ is caught with power 0.99 when δ ≥ η + (z_{1−α/2} + z_{0.99})·√V / n
(``detectable``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.inputs import check_alpha

DEFAULT_POWER = 0.99


@dataclass(frozen=True)
class AcceptanceTestResult:
    """Result of :func:`acceptance_test`.

    Attributes:
        statistic: z = (S − E) / √V (0 when V = 0 and S = E; ±inf when V = 0 and S ≠ E).
        pvalue: two-sided normal p-value of |S − E| reduced by η·n (1 when the reduction covers
            it; 0 on an impossible acceptance).
        n: draft positions visited (the test's sample size).
        drafts: drafts proposed; proposed: draft tokens proposed (visited or not).
        accepted: S, draft tokens the engine kept; expected: E, their expected number under the
            reference; variance: V.
        alpha: false-alarm rate; tolerance: η.
        impossible: draft tokens kept although the reference gives them probability 0.
        detectable: the shift δ in the mean acceptance probability per visited position caught
            with power 0.99 (``inf`` when n = 0).
        passed: ``pvalue >= alpha`` and no impossible acceptance.
    """

    statistic: float
    pvalue: float
    n: int
    drafts: int
    proposed: int
    accepted: int
    expected: float
    variance: float
    alpha: float
    tolerance: float
    impossible: int
    detectable: float
    passed: bool

    @property
    def rate(self) -> float:
        """Acceptance rate S / n (NaN when no position was visited)."""
        return self.accepted / self.n if self.n else math.nan

    @property
    def expected_rate(self) -> float:
        """E / n (NaN when no position was visited)."""
        return self.expected / self.n if self.n else math.nan


def visited_positions(tokens, laws, drafts):
    """The draft positions one sequence visits, with their outcomes.

    Args:
        tokens: n emitted token ids.
        laws: float64 [n, V]: row j the reference law of token j given the prompt and tokens[:j].
        drafts: the engine's drafts for this sequence, each ``(start, ids)``: the draft proposed
            after emitted token start − 1, whose first token would be emitted token ``start``
            (0 ≤ start); in the order proposed.
    Returns:
        (accepted, probs): int8 [m] and float64 [m], one entry per visited position.
    Raises:
        ValueError: a draft starting out of order (before the previous draft's last visited
            position + 1), a start < 0, a draft token outside the vocabulary.
    """
    laws = np.asarray(laws, dtype=np.float64)
    n = len(tokens)
    V = laws.shape[1] if laws.ndim == 2 else 0
    acc, prob = [], []
    next_free = 0
    for start, ids in drafts:
        start = int(start)
        if start < next_free:
            raise ValueError(f"drafts: a draft starts at emitted position {start}, inside a position "
                             f"already visited (first free position {next_free})")
        for k, d in enumerate(ids):
            j = start + k
            if j >= n:
                break
            d = int(d)
            if not 0 <= d < V:
                raise ValueError(f"drafts: draft token {d} is outside the vocabulary [0, {V})")
            hit = int(tokens[j]) == d
            acc.append(1 if hit else 0)
            prob.append(float(laws[j, d]))
            next_free = j + 1
            if not hit:
                break
    return np.array(acc, dtype=np.int8), np.array(prob, dtype=np.float64)


def acceptance_test(tokens, laws, drafts, alpha: float = 1e-3, tolerance: float = 0.0,
                    power: float = DEFAULT_POWER) -> AcceptanceTestResult:
    """Test the draft tokens an engine kept against the target's law (module doc).

    Args:
        tokens: N lists of emitted token ids.
        laws: N float64 arrays [n_i, V]: the reference law before each emitted token.
        drafts: N lists of ``(start, draft ids)`` (``visited_positions``).
        alpha: false-alarm rate, in (0, 1).
        tolerance: η in [0, 1): per-position error in the acceptance probability put down to
            float rounding.
        power: the power at which ``detectable`` is stated, in (0, 1).
    Returns:
        ``AcceptanceTestResult``.
    Raises:
        ValueError: lists of different lengths, bad drafts, alpha, tolerance or power.
    """
    alpha = check_alpha(alpha)
    power = check_alpha(power, "power")
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    eta = float(tolerance)
    if not (len(tokens) == len(laws) == len(drafts)):
        raise ValueError(f"tokens, laws and drafts must have one length, got {len(tokens)}, {len(laws)}, "
                         f"{len(drafts)}")
    accs, probs = [], []
    n_drafts = n_proposed = 0
    for toks, law, dr in zip(tokens, laws, drafts):
        dr = [(int(s), [int(t) for t in ids]) for s, ids in dr]
        n_drafts += sum(1 for _, ids in dr if ids)
        n_proposed += sum(len(ids) for _, ids in dr)
        if not toks:
            continue
        a, p = visited_positions(toks, law, dr)
        accs.append(a)
        probs.append(p)
    a = np.concatenate(accs) if accs else np.zeros(0, np.int8)
    p = np.concatenate(probs) if probs else np.zeros(0)
    n = int(a.size)
    S, E = int(a.sum()), float(p.sum())
    Vr = float((p * (1.0 - p)).sum())
    impossible = int(np.sum((a == 1) & (p <= 0.0)))
    excess = max(0.0, abs(S - E) - eta * n)
    if impossible:
        z, pv = (math.inf, 0.0)
    elif Vr > 0:
        z = (S - E) / math.sqrt(Vr)
        pv = float(2 * sps.norm.sf(excess / math.sqrt(Vr)))
    else:  # every p_j in {0, 1}: S = E exactly under the null
        z = 0.0 if S == E else math.copysign(math.inf, S - E)
        pv = 1.0 if excess <= 1e-9 else 0.0
    if n:
        det = eta + (sps.norm.isf(alpha / 2) + sps.norm.ppf(power)) * math.sqrt(Vr) / n
    else:
        det = math.inf
    return AcceptanceTestResult(float(z), min(1.0, pv), n, n_drafts, n_proposed, S, E, Vr, alpha, eta,
                                impossible, float(det), impossible == 0 and pv >= alpha)
