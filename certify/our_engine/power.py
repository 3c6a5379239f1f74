"""Power of the engine certificate's τ tests, computed from exact laws on the rows run
(``certify.engine``'s module doc, "Designed power"): a planted row's effect and power
(``planted_power``), a lossless row's power against each planted defect of its rule on its own
rows (``defect_power``), and the runs that reach ``TARGET_POWER`` (``runs_for_power``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spectr_gbv.certify.our_engine.runs import Runs

# a planted row runs until its mean test's power at α/3, computed from the exact laws of the
# rows it ran (``planted_power``), reaches TARGET_POWER (``certify.engine.PLANTED_MAX_FACTOR``)
TARGET_POWER = 0.99


@dataclass(frozen=True)
class PlantedPower:
    """A planted row's effect size and its mean test's power, from exact laws on its rows.

    Attributes:
        shift: mean over the iterations of E_planted[τ | rows] − E_base[τ | rows] (tokens).
        tv: total variation between the averaged τ laws, Σ_i P_i / n of the planted defect and
            of its base rule.
        power: probability that the paired mean test at ``alpha`` rejects, with this many
            iterations and these rows (``oracle.mean_tests.paired_mean_power``: shift Σ(m1 − m0),
            null variance Σ v0, alternative variance Σ v1; normal approximation).  The row is
            caught when the mean test or the τ-law G-test rejects, so this is a lower bound on
            the row's power.
        iterations: n.
    """

    shift: float
    tv: float
    power: float
    iterations: int


def planted_power(runs: Runs, alpha: float) -> PlantedPower | None:
    """``PlantedPower`` of a planted rule's runs at the mean test's level ``alpha`` (the row's
    α/3), or None when the defect has no exact law (``planted_laws.has_law``) or no iteration.

    Raises:
        ValueError: alpha outside (0, 1).
    """
    return _laws_power(runs.laws, runs.planted_laws, alpha)


def _laws_power(laws, planted_laws, alpha: float) -> PlantedPower | None:
    """``PlantedPower`` of the mean test when iteration i's τ has law ``planted_laws[i]`` and
    is tested against ``laws[i]`` (float [L+1] each); None without iterations or lengths that
    differ."""
    from spectr_gbv.oracle.mean_tests import paired_mean_power

    if not planted_laws or len(planted_laws) != len(laws):
        return None
    t = np.arange(len(laws[0]))
    p0, p1 = np.stack(laws), np.stack(planted_laws)
    m0, m1 = p0 @ t, p1 @ t
    v0 = np.maximum(p0 @ t**2 - m0**2, 0.0)
    v1 = np.maximum(p1 @ t**2 - m1**2, 0.0)
    tv = 0.5 * float(np.abs(p1.mean(axis=0) - p0.mean(axis=0)).sum())
    n = len(laws)
    if not v0.sum() > 0:
        return PlantedPower(float((m1 - m0).mean()), tv, math.nan, n)
    power = paired_mean_power(float((m1 - m0).sum()), float(v0.sum()), float(v1.sum()), alpha)
    return PlantedPower(float((m1 - m0).mean()), tv, power, n)


@dataclass(frozen=True)
class DefectPower:
    """A lossless row's power against one of its rule's planted defects (``defect_power``).

    Attributes:
        defect: the planted defect (``row_defects``).  K, L, n (runs), iterations: the row's.
        shift, tv: the defect's mean τ shift per iteration and the TV of the averaged τ laws,
            on the row's own rows.  power: the row's mean test's power at α/3 against the
            defect with these iterations (``oracle.mean_tests.paired_mean_power``; a lower bound on
            the row's, which also has the τ-law G-test).
        n_needed: runs at which that power reaches ``TARGET_POWER`` (iterations scale with the
            runs: ``runs_for_power``); n when it already does; 0 when the defect moves no mean.
        seconds_needed: n_needed × the row's measured seconds per run (NaN when not known).
    """

    defect: str
    K: int
    L: int
    n: int
    iterations: int
    shift: float
    tv: float
    power: float
    n_needed: int
    seconds_needed: float = math.nan

    def sentence(self) -> str:
        """One plain line: the power, and when below ``TARGET_POWER`` the N that reaches it."""
        head = (f"power {format_power(self.power)} against {self.defect} at K = {self.K}, L = {self.L}, "
                f"N = {self.n} runs ({self.iterations} iterations; mean τ shift {self.shift:+.3f}, "
                f"TV {self.tv:.3f})")
        if self.power >= TARGET_POWER:
            return head + f": ≥ {TARGET_POWER}"
        if self.n_needed <= 0:
            return head + ": the defect does not move mean τ on these rows; no N reaches " + f"{TARGET_POWER}"
        cost = (f" (about {self.seconds_needed / 60:.0f} min at this row's "
                f"{self.seconds_needed / self.n_needed:.1f} s per run)"
                if math.isfinite(self.seconds_needed) else "")
        return head + f": BELOW {TARGET_POWER}; N = {self.n_needed} runs would reach it{cost}"


def runs_for_power(shift_sum: float, null_variance: float, alt_variance: float, n_runs: int,
                   alpha: float, power: float = TARGET_POWER) -> int:
    """The runs at which the mean test reaches ``power``, when ``n_runs`` runs gave the sums
    ``shift_sum`` = Σ(m1 − m0), ``null_variance`` = Σv0 and ``alt_variance`` = Σv1 over their
    iterations and each sum grows in proportion to the runs (f = runs / n_runs):
    f = ((z_{1−α/2}√V0 + z_{power}√V1) / S)² from ``paired_mean_power``'s one-sided normal
    approximation, then raised run by run until ``paired_mean_power`` says ≥ ``power``.

    Returns:
        int ≥ 1 (n_runs when already reached); 0 when shift_sum is 0 (no N reaches it).
    Raises:
        ValueError: n_runs < 1, alpha or power outside (0, 1), null_variance ≤ 0.
    """
    from scipy import stats

    from spectr_gbv.oracle.mean_tests import paired_mean_power

    if n_runs < 1 or not 0 < alpha < 1 or not 0 < power < 1 or not null_variance > 0:
        raise ValueError(f"need n_runs >= 1, alpha and power in (0, 1), null_variance > 0; got "
                         f"{n_runs}, {alpha}, {power}, {null_variance}")
    if shift_sum == 0:
        return 0

    def reached(runs: int) -> bool:
        f = runs / n_runs
        return paired_mean_power(f * shift_sum, f * null_variance, f * alt_variance, alpha) >= power

    if reached(n_runs):
        return n_runs
    za, zp = stats.norm.isf(alpha / 2), stats.norm.isf(1 - power)
    f = ((za * math.sqrt(null_variance) + zp * math.sqrt(alt_variance)) / abs(shift_sum)) ** 2
    runs = max(n_runs + 1, math.ceil(f * n_runs) - 1)
    while not reached(runs):
        runs += 1
    return runs


def defect_power(runs: Runs, defect: str, alpha: float, seconds_per_run: float = math.nan) -> DefectPower | None:
    """``DefectPower`` of a lossless row's runs against ``defect`` (its laws on the row's rows,
    ``Runs.defect_laws``) at the mean test's level ``alpha`` (the row's α/3); None when the
    runs have no law of that defect or no iteration."""
    laws = runs.defect_laws.get(defect)
    pw = _laws_power(runs.laws, laws, alpha) if laws else None
    if pw is None or not math.isfinite(pw.power):
        return None
    t = np.arange(len(runs.laws[0]))
    p0, p1 = np.stack(runs.laws), np.stack(laws)
    m0, m1 = p0 @ t, p1 @ t
    v0 = float(np.maximum(p0 @ t**2 - m0**2, 0.0).sum())
    v1 = float(np.maximum(p1 @ t**2 - m1**2, 0.0).sum())
    n = len(runs.first_tokens)
    needed = runs_for_power(float((m1 - m0).sum()), v0, v1, n, alpha)
    return DefectPower(defect, runs.K, runs.L, n, pw.iterations, pw.shift, pw.tv, pw.power, needed,
                       needed * seconds_per_run if needed else math.nan)


def format_power(x: float) -> str:
    """A power near 1 with its distance to 1 (1 − 1e-9 reads "1-1e-09")."""
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if 1 - x >= 1e-4:
        return f"{x:.4f}"
    return f"1-{1 - x:.0e}" if 1 - x > 0 else "1-<1e-16"
