"""The engine certificate's lossless rows state their own power against their rule's planted
defects (issue 36, item 5), computed from exact laws at the row's own shape and N:

* ``runs_for_power``: the runs at which ``oracle.mean_tests.paired_mean_power`` reaches 0.99, by its
  formula (the smallest such number of runs, iterations growing in proportion);
* ``defect_power`` on a tiny exact case: GBV's τ law and its planted first-failure defect's,
  given toy rows (V = 4, K = 1, L = 4; mean τ shift −0.26, TV 0.083), repeated as the iterations of a few runs: the stated
  power is the mean test's at α/3 on those laws, the N it names reaches 0.99 and N − 1 does not;
* the rows of ``certify_engine`` (a fake ``run_rule``): a lossless row carries the power, and the
  table says plainly when it is below 0.99 and which N would reach it, with the time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spectr_gbv.certify.our_engine import certificate as ec
from spectr_gbv.certify.our_engine import power as ep
from spectr_gbv.certify.our_engine import runs as er
from spectr_gbv.certify.planted_laws import planted_tau_law
from spectr_gbv.oracle.certify_cases import coverage_models, fixed_case
from spectr_gbv.oracle.mean_tests import paired_mean_power

A3 = 1e-3 / 3  # the engine row's α/3


def test_runs_for_power_is_the_smallest_n_reaching_099():
    # 10 runs gave 40 iterations: shift 0.2, null variance 2, alternative variance 1.8 each
    S, V0, V1 = 0.2 * 40, 2.0 * 40, 1.8 * 40
    n = ep.runs_for_power(S, V0, V1, 10, A3)

    def power(runs):
        f = runs / 10
        return paired_mean_power(f * S, f * V0, f * V1, A3)

    assert power(n) >= 0.99 > power(n - 1)
    # the closed form: 40 f iterations with f = ((z_{α/6}·√2 + z_{0.99}·√1.8) / 0.2)² / 40 · …
    z_a, z_p = 3.5882, 2.3263
    f = ((z_a * math.sqrt(V0) + z_p * math.sqrt(V1)) / S) ** 2
    assert abs(n - 10 * f) <= 2
    assert n == 420
    assert ep.runs_for_power(S * 10, V0, V1, 10, A3) == 10  # already reached
    assert ep.runs_for_power(0.0, V0, V1, 10, A3) == 0  # no shift: no N reaches it
    with pytest.raises(ValueError):
        ep.runs_for_power(S, 0.0, V1, 10, A3)


@pytest.fixture(scope="module")
def toy_rows():
    draft, target = coverage_models(4, 4)  # GBV's τ: 0.69 at 0; first failure shifts it by −0.26
    case = fixed_case("toy", "gbv", draft, target, 1, 4, 5, backend_dtype="float64")
    return case.draft_tokens, case.draft_probs, case.target_probs


def _runs(rows, n_runs: int, per_run: int) -> er.Runs:
    base = er.tau_law("gbv", *rows)
    defect = planted_tau_law("planted_gbv_first_failure", *rows)
    runs = er.Runs("gbv", "gbv", 1, 4)
    runs.defect_laws["planted_gbv_first_failure"] = []
    for _ in range(n_runs):
        runs.first_tokens.append(0)
        for _ in range(per_run):
            runs.taus.append(0)
            runs.laws.append(base)
            runs.defect_laws["planted_gbv_first_failure"].append(defect)
    runs.generate_s, runs.law_s = 2.0 * n_runs, 0.5 * n_runs  # 2.5 s per run
    return runs


def test_defect_power_on_exact_toy_laws(toy_rows):
    base = er.tau_law("gbv", *toy_rows)
    defect = planted_tau_law("planted_gbv_first_failure", *toy_rows)
    t = np.arange(5)
    m0, m1 = base @ t, defect @ t
    v0, v1 = base @ t**2 - m0**2, defect @ t**2 - m1**2
    assert m1 < m0 - 0.05  # stopping at the first failure shortens τ
    runs = _runs(toy_rows, 3, 4)  # 12 iterations
    d = ep.defect_power(runs, "planted_gbv_first_failure", A3, 2.5)
    assert d.iterations == 12 and d.n == 3 and (d.K, d.L) == (1, 4)
    assert d.shift == pytest.approx(m1 - m0, abs=1e-12)
    assert d.tv == pytest.approx(0.5 * np.abs(defect - base).sum(), abs=1e-12)
    assert d.power == pytest.approx(paired_mean_power(12 * (m1 - m0), 12 * v0, 12 * v1, A3), abs=1e-12)
    assert d.power < 0.99 and d.n_needed > 3
    f = d.n_needed / 3
    assert paired_mean_power(f * 12 * (m1 - m0), f * 12 * v0, f * 12 * v1, A3) >= 0.99
    f = (d.n_needed - 1) / 3
    assert paired_mean_power(f * 12 * (m1 - m0), f * 12 * v0, f * 12 * v1, A3) < 0.99
    assert d.seconds_needed == pytest.approx(2.5 * d.n_needed)
    text = d.sentence()
    assert "BELOW 0.99" in text and f"N = {d.n_needed} runs would reach it" in text and "2.5 s per run" in text
    # with enough runs the row states ≥ 0.99 and needs no more
    big = ep.defect_power(_runs(toy_rows, d.n_needed, 4), "planted_gbv_first_failure", A3)
    assert big.power >= 0.99 and big.n_needed == d.n_needed and big.sentence().endswith("≥ 0.99")
    assert ep.defect_power(runs, "planted_bv_first_failure", A3) is None  # no laws of it


def test_row_defects_are_the_rules_planted_defects_with_a_law():
    assert er.row_defects("gbv") == ("planted_gbv_first_failure",)
    assert er.row_defects("bv") == ("planted_bv_shared_uniform", "planted_bv_first_failure")
    assert er.row_defects("spectr") == ("planted_spectr_rho1",)
    assert er.row_defects("mdbv_kseq") == ()  # its fallback defect has no exact law
    assert er.row_defects("planted_gbv_first_failure") == ()


def test_certify_engine_rows_state_their_power(monkeypatch, toy_rows):
    pytest.importorskip("torch")

    def fake_run_rule(target, draft, name, prompt_ids, n_seeds, *args, **kw):
        if name == "gbv":
            return _runs(toy_rows, n_seeds, 4)
        runs = _runs(toy_rows, n_seeds, 4)
        runs.name, runs.planted_laws, runs.defect_laws = name, runs.defect_laws.pop(
            "planted_gbv_first_failure"), {}
        return runs

    monkeypatch.setattr(ec, "run_rule", fake_run_rule)
    monkeypatch.setattr(ec, "target_first_token_law", lambda *a, **k: np.array([1.0, 0.0]))
    cert = ec.certify_engine(None, None, [1], ["gbv"], n_seeds=3, planted_shapes=False)
    row = cert.rows[0]
    assert row.kind == "lossless" and len(row.defect_powers) == 1
    d = row.defect_powers[0]
    assert d.defect == "planted_gbv_first_failure" and row.defect_power == d.power < 0.99
    assert d.seconds_needed == pytest.approx(2.5 * d.n_needed)
    table = ec.text_table(cert.rows)
    assert f"gbv: power {ep.format_power(d.power)} against planted_gbv_first_failure at K = 1, L = 4, N = 3" in table
    assert f"N = {d.n_needed} runs would reach it" in table
    assert "0/1 lossless rows have power ≥ 0.99" in ec.summary(cert) and "NOT gbv" in ec.summary(cert)
    js = row.to_json()
    assert js["defect_powers"][0]["n_needed"] == d.n_needed


def test_run_rule_records_the_defect_laws_of_a_lossless_row():
    """On a small random model through the real engine: a lossless row's runs carry, per
    iteration, the τ law of each planted defect of its rule (blocks capped near the end
    included), and its row states the power from them."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from helpers.engine_models import PROMPT, perturbed, random_lm

    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    torch.set_num_threads(1)
    target = random_lm(1)
    draft = perturbed(target, 2)
    runs = er.run_rule(target, draft, "bv", PROMPT, 2, 6, SamplingConfig(1.0), SamplingConfig(1.5))
    assert sorted(runs.defect_laws) == ["planted_bv_first_failure", "planted_bv_shared_uniform"]
    for laws in runs.defect_laws.values():
        assert len(laws) == len(runs.laws) == len(runs.taus) >= 2
        assert all(p.shape == (runs.L + 1,) and p.sum() == pytest.approx(1.0) for p in laws)
    row = ec.certify_runs(runs, np.full(runs_first_v(target), 1.0 / runs_first_v(target)), 1e-3, "lossless")
    assert [d.defect for d in row.defect_powers] == sorted(runs.defect_laws)
    assert all(0.0 <= d.power <= 1.0 and d.n == 2 for d in row.defect_powers)


def runs_first_v(model) -> int:
    return int(model.config.vocab_size)
