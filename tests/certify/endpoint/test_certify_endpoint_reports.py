"""``certify endpoint``'s judgement of what a deployment reports (tests/helpers/fake_deployment.py:
the V = 64 chain, reference ``self``, the default plan of 80 × 16 tokens, α = 1e-3).

- Every sampled token's reported log-probability 0.3 nats too high ("logprobs-plus-0.3"): under
  the 1-nat bound, it used to PASS; the sign test of the median gap (oracle/sequence_reports.py,
  τ = 0.1 nats, α/48: the report share α/16 split three ways) FAILs it, the law tests passing.
- Numerics noise of bfloat16's size (N(0, 0.15²) per token, "bf16-logprob-noise"): PASS.
- One report 3 nats off ("one-wrong-logprob"): the deterministic bound FAILs it on its own (the
  sign test, one gap in 1,280, passes).
- Identical samples for different seeds ("cached"): FAIL (exit 1) with the dependence named, not
  REFUSED (exit 2: a CI gate that treats 2 as an infrastructure error would let it through).
"""

import json

import pytest

from helpers.fake_deployment import serve
from spectr_gbv.cli import main as cli_main


def _run(capsys, url, tmp_path, *extra, name="run"):
    out = tmp_path / f"{name}.json"
    argv = ["certify", "endpoint", url, "--json", str(out), "--record", str(tmp_path / f"{name}.jsonl")] + list(extra)
    if not {"--samples", "--max-samples", "--max-time"} & set(extra):
        argv += ["--samples", "80"]  # the fixed plan these tests were sized for (the default is sequential)
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err, json.loads(out.read_text()) if out.exists() else None


def _shift(cert):
    return next(r for r in cert["reports"] if r["name"] == "reported log-probs: shift")


def test_a_systematic_misreport_of_three_tenths_of_a_nat_fails(capsys, tmp_path):
    with serve("logprobs-plus-0.3") as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    assert cert["family"]["passed"] and cert["logprobs"]["passed"]  # the law is right; no gap over 1 nat
    shift = _shift(cert)
    # look 1 of the certificate: the report share alpha_1/16 = alpha/32, split in three
    assert not shift["passed"] and shift["alpha"] == pytest.approx(1e-3 / 2 / 16 / 3, rel=1e-12)
    assert shift["pvalue"] < 1e-100
    assert shift["observed"] > 1100 and shift["n"] == 1280  # gaps above +0.1: all but tokens near log p = 0
    assert out.splitlines()[0].startswith("verdict: FAIL — decided by reported log-probs: shift")
    assert any(x.startswith("reported log-probs: shift:") and x.endswith("<- FAIL") for x in out.splitlines())


def test_bfloat16_sized_numerics_noise_passes(capsys, tmp_path):
    with serve("bf16-logprob-noise") as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 0 and cert["verdict"] == "PASS", out + err
    shift = _shift(cert)
    assert shift["passed"] and 0.3 < cert["logprobs"]["largest"] < 1.0  # the noise is there, under the bound
    assert shift["observed"] < 1280 * 0.35  # about a quarter of N(0, 0.15²) lies above 0.1 nats


def test_a_single_wildly_wrong_report_fails_on_its_own(capsys, tmp_path):
    with serve("one-wrong-logprob") as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    assert cert["logprobs"]["over"] == 1 and abs(cert["logprobs"]["largest"] - 3.0) < 1e-9
    assert _shift(cert)["passed"] and cert["family"]["passed"]


def test_identical_samples_for_different_seeds_fail_with_the_dependence_named(capsys, tmp_path):
    with serve("cached") as (url, state):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 1 and cert["verdict"] == "FAIL" and cert["refused"] == "", out + err
    assert cert["dependence"].startswith("samples dependent: the server returned identical samples")
    assert out.splitlines()[0].startswith("verdict: FAIL — decided by samples dependent")
    assert any(x.startswith("identical samples:") and x.endswith("<- FAIL") for x in out.splitlines())
    assert state.requests < 200  # stopped early, not after the whole plan


def test_samples_sharing_prefixes_fail_as_dependent_not_as_a_wrong_law(capsys, tmp_path):
    """Half the samples (odd seeds) copy the first 8 tokens of their prompt's first sample, each
    sample's own law exact: the shared-prefix test (oracle/sequence_reports.py) FAILs and the verdict
    says "samples dependent"; no identical pair (the tails differ)."""
    with serve("shared-prefix") as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    shared = next(r for r in cert["reports"] if r["name"] == "independence: shared prefixes")
    assert not shared["passed"] and shared["pvalue"] < 1e-20 and shared["observed"] > 2 * shared["expected"]
    assert cert["dependence"].startswith("samples dependent: ") and "conditional on it" in cert["dependence"]
    assert out.splitlines()[0].startswith("verdict: FAIL — decided by samples dependent (shared prefixes)")


def test_independent_samples_pass_the_shared_prefix_test(capsys, tmp_path):
    with serve() as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 0, out + err
    shared = next(r for r in cert["reports"] if r["name"] == "independence: shared prefixes")
    # 80 samples over 8 prompts: first tokens of one prompt often coincide (π is their probability)
    assert shared["passed"] and shared["n"] > 70 and shared["alpha"] == pytest.approx(1e-3 / 2 / 16 / 3, rel=1e-12)
