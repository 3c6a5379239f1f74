"""Planted defects caught with designed power (issue 27, item 6), asserted by computation:

* each reference analogue of a planted defect (certify/planted_laws.py) has the
  τ law of the torch planted verifier on its toy case: a G-test of N = 32,768 sampled τ's
  against the analogue's exact law at α = 1e-6 (power 0.99 against a TV of
  ``detectable_tv(32768, 1e-6, n_cells=4)`` ≈ 0.04 or more, far below the defects' effects of
  0.10-0.63 from their base rules);
* every planted row of the verifier certificate (planted defects on their toy cases, lossy
  rules against the target's first-token law) has effect TV ≥ 0.02 and its τ-law (or
  first-token) G-test power ≥ 0.99 at the row's N in --quick and in the full run, at α = 1e-6;
* ``oracle.mean_tests.paired_mean_power`` (the engine certificate's stated power) against its
  formula's limits and a simulation;
* the engine certificate's planted rows run on until the power is reached (a fake run_rule),
  and state effect and power; progress lines without a terminal (run_rule every
  ``LOG_SECONDS``; ``certify our-engine``'s log on stderr).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.certify.our_engine import certificate as ec  # noqa: E402
from spectr_gbv.certify.our_engine import power as ep  # noqa: E402
from spectr_gbv.certify.our_engine import runs as er  # noqa: E402
from spectr_gbv.gpu_backend.models.pair import ModelPair  # noqa: E402
from spectr_gbv.certify import planted_laws
from spectr_gbv.certify import suite  # noqa: E402
from spectr_gbv.certify.verifiers import run as vc  # noqa: E402
from spectr_gbv.oracle.gtest import gtest  # noqa: E402
from spectr_gbv.oracle.gtest_power import detectable_tv  # noqa: E402
from spectr_gbv.oracle.mean_tests import paired_mean_power  # noqa: E402
from spectr_gbv.reference.rules import registry  # noqa: E402

WITH_LAW = [n for n in registry.planted() if planted_laws.has_law(n)]
N_CHECK = 1 << 15
ALPHA_CHECK = 1e-6


@pytest.mark.parametrize("name", WITH_LAW)
def test_reference_analogue_has_the_torch_planted_law(name):
    p = registry.planted()[name]
    case = suite.planted_case(p)
    law = planted_laws.planted_tau_law(name, case.draft_tokens, case.draft_probs, case.target_probs)
    sampled, _ = planted_laws._sampled_tau_law(name, case, N_CHECK, seed=11)
    counts = {t: int(round(c * N_CHECK)) for t, c in enumerate(sampled) if c > 0}
    result = gtest(counts, {t: float(x) for t, x in enumerate(law)}, ALPHA_CHECK)
    assert detectable_tv(N_CHECK, ALPHA_CHECK, n_cells=len(law)) < 0.05
    assert result.passed, (name, law, sampled, result.pvalue)


def test_every_engine_planted_defect_of_the_ci_rules_has_an_exact_law():
    assert set(ec.planted_for(ec.CI_RULES)) <= set(WITH_LAW)
    assert not planted_laws.has_law("planted_mdbv_kseq_fallback")  # stated as "-" (no analogue)


@pytest.mark.parametrize("quick", [True, False])
@pytest.mark.parametrize("name", list(registry.planted()))
def test_verifier_certificate_planted_rows_have_power_099(name, quick):
    n = vc.planned_n("planted", quick)
    cp = planted_laws.planted_case_power(registry.planted()[name], n, vc.DEFAULT_ALPHA)
    print(f"{name}: effect TV {cp.effect_tv:.4f} ({'exact' if cp.exact else 'sampled'}), N = {n}, "
          f"{cp.test} at α = {cp.alpha:.3g}: power {vc.power_text(cp.power)}")
    assert cp.n == n and cp.alpha == vc.DEFAULT_ALPHA / 4  # V = 3 toy: four tests, α/4 each
    assert cp.effect_tv >= 0.09 and cp.power >= 0.99


@pytest.mark.parametrize("rule", registry.names(lossless=False))
def test_lossy_law_rows_have_power_099(rule):
    for quick in (True, False):
        n = vc.planned_n("law_planted", quick)
        cp = planted_laws.lossy_first_token_power(rule, n, vc.DEFAULT_ALPHA)
        # P(first = a) = 4125/13328 instead of 1/3 for the released rule (docs/toy.md)
        assert cp.effect_tv >= 0.02 and cp.power >= 0.99, cp
    released = planted_laws.lossy_first_token_power("spectr_gbv", 100_000, 1e-6)
    assert released.effect_tv == pytest.approx(1 / 3 - 4125 / 13328, abs=1e-12)


def test_gtest_power_limits():
    p0 = np.array([0.5, 0.5])
    assert planted_laws.gtest_power(p0, p0, 1000, 1e-3) == pytest.approx(1e-3)  # no effect: α
    assert planted_laws.gtest_power(p0, np.array([0.6, 0.4]), 10, 1e-6) < 0.01
    assert planted_laws.gtest_power(p0, np.array([0.6, 0.4]), 20_000, 1e-6) > 1 - 1e-9
    # mass where the null has none: seen with probability 1 − (1 − 0.01)^n
    got = planted_laws.gtest_power(np.array([0.5, 0.5, 0.0]), np.array([0.495, 0.495, 0.01]), 100, 1e-6)
    assert got >= 1 - 0.99**100


def test_paired_mean_power_formula_and_simulation():
    from scipy import stats

    z = stats.norm.isf(1e-3 / 2)
    assert paired_mean_power(0.0, 4.0, 4.0, 1e-3) == pytest.approx(1e-3, rel=1e-9)
    # shift exactly at the edge: half the alternative's mass beyond it
    assert paired_mean_power(z * 2.0, 4.0, 4.0, 1e-3) == pytest.approx(0.5, abs=1e-6)
    assert paired_mean_power(z * 2.0, 4.0, 0.0, 1e-3) == 0.0 and paired_mean_power(z * 2.1, 4.0, 0.0, 1e-3) == 1.0
    # simulation: n = 400 Bernoulli(0.3) against a null mean 0.25, α = 0.01 (two-sided z-test)
    rng = np.random.default_rng(0)
    n, p0, p1 = 400, 0.25, 0.3
    sums = rng.binomial(n, p1, size=20_000) - n * p0
    rejected = np.abs(sums) / math.sqrt(n * p0 * (1 - p0)) > stats.norm.isf(0.005)
    predicted = paired_mean_power(n * (p1 - p0), n * p0 * (1 - p0), n * p1 * (1 - p1), 0.01)
    # 20,000 draws: the rejection rate's standard error ≤ 0.0036; the normal approximation of a
    # binomial at n = 400 adds ≤ 0.02
    assert abs(rejected.mean() - predicted) < 0.03, (rejected.mean(), predicted)
    with pytest.raises(ValueError):
        paired_mean_power(1.0, 0.0, 1.0, 0.01)


def _fake_runs(name, n, shift, K=1, L=4, per_run=4):
    """n runs of ``per_run`` iterations each whose base law is uniform on 0..L and whose planted law
    moves ``shift`` of the mass from τ = 0 to τ = L (mean shift L·shift per iteration)."""
    base = np.full(L + 1, 1 / (L + 1))
    moved = base.copy()
    moved[0] -= shift
    moved[L] += shift
    runs = er.Runs(name, "gbv", K, L)
    for _ in range(n):
        runs.first_tokens.append(1)
        for _ in range(per_run):
            runs.taus.append(L)
            runs.laws.append(base)
            runs.planted_laws.append(moved)
    return runs


def test_engine_planted_rows_run_until_the_power_is_reached(monkeypatch):
    calls = []

    def fake_run_rule(target, draft, name, prompt_ids, n_seeds, *args, **kw):
        calls.append((name, n_seeds, args[5], args[4]))  # first_seed, L
        return _fake_runs(name, n_seeds, 0.05)

    monkeypatch.setattr(ec, "run_rule", fake_run_rule)
    monkeypatch.setattr(ec, "target_first_token_law", lambda *a, **k: np.array([0.0, 1.0]))
    lines = []
    cert = ec.certify_engine(None, None, [1], ["gbv"], n_seeds=5, log=lines.append)
    good, bad = cert.rows
    assert good.n == 5 and math.isnan(good.power)
    # the planted rows run blocks of PLANTED_L = 8 (the fake's laws stay at L = 4)
    assert [c[3] for c in calls] == [4, 8, 8, 8] and ec.PLANTED_L == 8
    # per iteration: shift 4·0.05 = 0.2, null variance 2 (uniform on 0..4); at α/3 = 3.3e-4
    # the power reaches 0.99 after ((3.59·√2 + 2.33·σ1) / 0.2)² ≈ 1,000 iterations: 250 runs,
    # beyond the cap of 4 × 5 = 20 runs, so the row stops at 20 and states its power
    assert bad.n == 20 and [c[1] for c in calls] == [5, 5, 10, 5]
    assert [c[2] for c in calls] == [0, 0, 5, 15]  # later seeds, never a seed twice
    assert bad.effect_shift == pytest.approx(0.2) and bad.effect_tv == pytest.approx(0.05)
    t = np.arange(5)
    v1 = float(((np.array([0.15, 0.2, 0.2, 0.2, 0.25]) * t**2).sum()) - 2.2**2)
    assert bad.power == pytest.approx(paired_mean_power(0.2 * 80, 2.0 * 80, v1 * 80, 1e-3 / 3))
    assert bad.power < 0.99 and sum("running more" in x for x in lines) == 2  # 5 → 15 → 20
    assert "power" in ec.text_table(cert.rows) and ep.format_power(bad.power) in ec.text_table(cert.rows)
    # a large effect: shift 0.8 per iteration, 100 iterations at N = 5: power
    # Φ((80 − 3.59·√200) / √136) ≈ 0.994 ≥ 0.99 already, no further runs
    monkeypatch.setattr(ec, "run_rule", lambda *a, **k: _fake_runs(a[2], a[4], 0.2, per_run=20))
    cert = ec.certify_engine(None, None, [1], ["gbv"], n_seeds=5)
    assert cert.rows[1].n == 5 and 0.99 <= cert.rows[1].power < 0.999


def test_run_rule_logs_every_log_seconds(monkeypatch):
    from helpers.engine_models import PROMPT, perturbed, random_lm

    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    torch.set_num_threads(1)
    target = random_lm(1)
    draft = perturbed(target, 2)
    monkeypatch.setattr(er, "LOG_SECONDS", 0.0)  # every run is "30 s" after the last line
    lines = []
    runs = er.run_rule(target, draft, "planted_gbv_first_failure", PROMPT, 3, 6, SamplingConfig(1.0),
                       SamplingConfig(1.5), log=lines.append)
    assert [x.split(":")[1].strip().split(" ")[0] for x in lines] == ["1/3", "2/3", "3/3"]
    assert len(runs.planted_laws) == len(runs.laws) == len(runs.taus) >= 3
    for p0, p1 in zip(runs.laws, runs.planted_laws):
        assert p0.sum() == pytest.approx(1.0) and p1.sum() == pytest.approx(1.0)


def test_certify_engine_cli_prints_progress_without_a_terminal(monkeypatch, capsys):
    from spectr_gbv.cli import main as cli_main
    from spectr_gbv.gpu_backend.models import prompts

    def fake_certify(target, draft, ids, rules, *, log=None, progress=None, **kw):
        log("gbv: 10/60 runs, 70 iterations (50 s generating, 1 s exact laws)")
        row = ec.EngineRow("planted_gbv_first_failure", "gbv", "planted", 1, 4, 60, 400, 1e-3,
                           mean_pvalue=1e-9, tau_pvalue=1e-9, effect_shift=-0.8, effect_tv=0.4, power=0.9999)
        progress(row)
        return ec.EngineCertification([row], "setup")

    monkeypatch.setattr(ec, "certification_pair", lambda *a, **k: ModelPair(None, None, None))
    monkeypatch.setattr(prompts, "encode_prompt", lambda tok, text, chat=True: [1, 2])
    monkeypatch.setattr(ec, "certify_engine", fake_certify)
    assert cli_main.main(["certify", "our-engine", "--rules", "gbv"]) == 0
    err = capsys.readouterr().err
    assert "certify our-engine: gbv: 10/60 runs" in err  # stderr is captured: not a terminal
    assert "CAUGHT planted_gbv_first_failure" in err and "power 0.999900" in err


def test_planted_shapes_are_the_measured_ones():
    # ρ = 1 defects: K = 3 (SpecTr's mean τ shift 0.26 per iteration against 0.15 at K = 2);
    # the other defects with an exact law: L = 8; planted_mdbv_kseq_fallback as before
    assert ec.planted_shape("planted_spectr_rho1", 2, 4) == (3, 4)
    assert ec.planted_shape("planted_kseq_gbv_rho1", 4, 4) == (4, 4)
    assert ec.planted_shape("planted_sd_shared_uniform", 2, 4) == (2, 8)
    assert ec.planted_shape("planted_gbv_first_failure", 2, 4) == (2, 8)
    assert ec.planted_shape("planted_mdbv_kseq_fallback", 2, 4) == (2, 4)
