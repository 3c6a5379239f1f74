"""The default plan of ``certify endpoint``: sized by what it must resolve, valid under optional stopping.

A fixed count (``--samples N``) means different things on different models: 80 × 16 tokens resolve
a temperature change |Δβ| ≥ 0.05 on one model and only ≥ 0.12 on a model of broader laws.  The
sequential plan (``Plan.sequential``) instead keeps sampling until the samples resolve
``TARGETS`` at power 0.99 — or a budget (``Plan.max_samples``, ``Plan.max_time_s``) ends it, and
then the verdict says what was resolved and what was not.

The design (stated; every false-alarm bound below holds whatever the stopping rule):

- **Looks** at a schedule fixed before any sample: the pilot N₀ (``Plan.n_samples``), then
  doubling, N_k = N₀·2^k, the last look at ``max_samples`` (``looks``).  Look k tests the samples of
  indices 0 … N_k − 1 (a prefix: samples beyond it, still in flight at a look, wait for the next).
- **The directional tests are e-values** (temperature, truncation, position shift, draft leak:
  ``oracle.sequence_scores``): products over tokens, in sample order, of factors of mean ≤ 1 under
  the null — test supermartingales.  By Ville's inequality P(some look has W ≥ 1/a) ≤ a, so each
  runs at every look at its full share a of α (``family_test(directional_alpha=α)``) with no
  correction for the looks.
- **The omnibus KS rows and the report tests** (fixed-sample tests) are spent over the
  certificate's looks (``oracle.look_spending``): look j = 1, 2, … — counted over every run that
  continued the run file (``--resume``), stopped runs' prefix tests included — takes
  α_j = α / (j (j + 1)) of their share; Σ_j α_j < α for any number of looks, so the union bound
  keeps the family's false-alarm rate ≤ α however often the certificate is continued.  The
  default plan's five looks take α/2, α/6, α/12, α/20, α/30; a look skipped (the run stopped
  earlier) leaves its share for the next run's looks.
- **Stopping**: at the first look that FAILs (a FAIL); at the first look that passes and resolves
  every target (``resolution``: the temperature e-value's detectable |Δβ| from the samples' own
  information, the pooled KS row's detectable per-token TV at α_j, and a sampler left at top-p 0.99
  — cutting at most 1 % of each law's mass — caught for sure); at the last look; or when
  ``max_time_s`` runs out, when the longest prefix of samples collected is tested at the next
  look's α_j (its size set by the clock, not by the samples' values).
- **The pilot** (look 0) measures the information per sample: ``samples_needed`` scales its records
  (``oracle.sequence_family.plan_power``) to the first look that would resolve every target, which
  the log and the verdict state (the schedule does not depend on it).

``--samples N`` keeps the fixed plan: one look (look 1 of a new run file: α/2 for the fixed-sample
tests).  A run continued (``--resume`` with more samples) goes on with the next looks; a run file
whose look FAILed is not continued (the verdict stands).
"""

from __future__ import annotations

import math

from spectr_gbv.oracle.look_spending import look_alpha
from spectr_gbv.oracle.sequence_family import OMNIBUS_SHARE, plan_power
from spectr_gbv.oracle.sequence_test import ORDERS, detectable_deviation

# what the default plan must resolve, at power 0.99: temperature |Δβ| (≈ |ΔT|/T), a truncation of
# this fraction of each law's mass (top-p 0.99 caught for sure), the omnibus per-token TV
TARGETS = {"temperature": 0.05, "truncation": 0.01, "omnibus": 0.05}
TRUNCATION_LEVEL = "top-p 0.99"
# the default budget of the sequential plan (the CLI's --max-samples, --max-time)
MAX_SAMPLES = 1280
MAX_TIME_S = 600.0
# the furthest look ``samples_needed`` predicts (samples)
PREDICT_LIMIT = 2**22


def looks(pilot: int, max_samples: int) -> list[int]:
    """The looks' sample counts: pilot, 2·pilot, 4·pilot, … below ``max_samples``, then ``max_samples``."""
    out, n = [], int(pilot)
    while n < max_samples:
        out.append(n)
        n *= 2
    out.append(int(max_samples))
    return out


def omnibus_detectable(n_tokens: int, alpha_look: float, tolerance: float) -> float:
    """The pooled KS row's detectable per-token TV (power 0.99) at n_tokens and a look's α_j (the
    family's pooled share: α_j·OMNIBUS_SHARE/2 per order)."""
    return detectable_deviation(max(1, int(n_tokens)), alpha_look * OMNIBUS_SHARE / 2 / len(ORDERS), tolerance)


def resolution(records, n_tokens: int, alpha: float, alpha_look: float, tolerance: float, family=None) -> dict:
    """What a look resolves at power 0.99, as {target: (figure, resolved)}.

    temperature: the |Δβ| the temperature e-value catches (its full share of α); omnibus: the pooled
    KS row's per-token TV at α_j; truncation: 1 % when a sampler left at top-p 0.99 is caught for
    sure, else the largest level cut (of the test's top-p levels) that is, or inf.  ``records``: the
    look's per-token records (or a pilot's, scaled to ``n_tokens``); ``family``: the look's
    ``FamilyResult``, whose own figures are used when given."""
    recs = [r for r in records if not r.get("imp")]
    if not recs:
        return {k: (math.inf, False) for k in TARGETS}
    pp = plan_power(recs, int(n_tokens), alpha, tolerance)
    temp = pp.temperature
    omni = omnibus_detectable(n_tokens, alpha_look, tolerance + max((r.get("pe", 0.0) for r in recs), default=0.0))
    if family is not None:
        t = family.test("temperature")
        temp = t.detectable if t is not None else math.inf
        omni = family.detectable
    caught = [float(k.split()[1]) for k, v in pp.truncation.items() if v and k.startswith("top-p")]
    trunc = TARGETS["truncation"] if pp.truncation.get(TRUNCATION_LEVEL) else (
        round(1 - min(caught), 6) if caught else math.inf)
    return {"temperature": (float(temp), temp <= TARGETS["temperature"]),
            "truncation": (float(trunc), trunc <= TARGETS["truncation"]),
            "omnibus": (float(omni), omni <= TARGETS["omnibus"])}


def samples_needed(records, n_new: int, alpha: float, tolerance: float, schedule: list[int]) -> int | None:
    """The first look, on ``schedule`` continued by doubling up to ``PREDICT_LIMIT``, whose samples
    (scaled from ``records``) resolve every target; None when none does (e.g. a top-k reference whose
    lists never reach the top-p 0.99 nucleus)."""
    recs = [r for r in records if not r.get("imp")]
    if not recs:
        return None
    cand = list(schedule)
    while cand[-1] * 2 <= PREDICT_LIMIT:
        cand.append(cand[-1] * 2)

    def meets(k, n):
        res = resolution(recs, n * n_new, alpha, look_alpha(alpha, k + 1), tolerance)
        return all(ok for _, ok in res.values())

    if not meets(len(cand) - 1, cand[-1]):
        return None
    for k, n in enumerate(cand):
        if meets(k, n):
            return n
    return None


def describe(res: dict) -> tuple[str, str]:
    """(resolved, not resolved) as phrases."""
    names = {"temperature": lambda v: f"temperature |Δβ| >= {v:.3g}",
             "truncation": lambda v: (f"a truncation of {v:.0%} of the mass" if math.isfinite(v)
                                      else "no truncation level"),
             "omnibus": lambda v: f"omnibus per-token TV >= {v:.3f}"}
    target = {"temperature": f"|Δβ| <= {TARGETS['temperature']:g}",
              "truncation": f"{TARGETS['truncation']:.0%} of the mass",
              "omnibus": f"TV <= {TARGETS['omnibus']:g}"}
    ok = [names[k](v) for k, (v, r) in res.items() if r]
    bad = [f"{names[k](v)} (target {target[k]})" for k, (v, r) in res.items() if not r]
    return ", ".join(ok), ", ".join(bad)
