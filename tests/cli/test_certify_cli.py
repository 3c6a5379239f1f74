"""``spectr-gbv certify verifiers`` (cli/certify_verifiers.py) at small N: exit status, JSON and markdown
outputs, argument errors, and the planted wrong rules of certify/suite.py.

N = 5,000 per case (detectable TV ~0.06 on the toy cases): enough to catch every planted rule
on fixed drafts (p-values below 1e-40) while each CLI run stays within a few seconds; the full-size runs are
tests/certify/verifiers/test_verifiers_certify.py and test_verifiers_certify_distinctive.py.
"""

from __future__ import annotations

import json

import pytest
import torch

from spectr_gbv.cli import main as cli_main
from spectr_gbv.certify.verifiers import run as certification
from spectr_gbv.cli import certify_verifiers as verifiers_cli
from spectr_gbv.certify import suite
from spectr_gbv.certify.planted import FirstFailureBV, UnscaledSpecTr
from spectr_gbv.certify.suite import PLANTED, suite_verifier
from spectr_gbv.gpu_backend.verifiers.bv import BlockVerification
from spectr_gbv.oracle.certify import certify_case
from spectr_gbv.oracle.certify_cases import lossless_against_target, released_rule_against_target
from spectr_gbv.reference.rules import registry
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)

N = "5000"


def certify(argv, capsys):
    code = cli_main.main(["certify", "verifiers"] + argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_zero_json_and_markdown_when_everything_passes(tmp_path, capsys):
    """N = 3·10^4: the law-level planted case (the released rule, first-token TV 0.024) needs a
    detectable TV below 0.024 (0.021 here; at N = 5,000 it is missed, p = 7e-6)."""
    js, md = tmp_path / "c.json", tmp_path / "c.md"
    code, out, _ = certify(["--rules", "bv,spectr_gbv", "--quick", "--samples", "30000",
                            "--json", str(js), "--markdown", str(md)], capsys)
    assert code == 0, out
    rows = json.loads(js.read_text())
    keys = {"rule", "case", "kind", "N", "alpha", "detectable_delta", "pvalue", "passed", "caught",
            "statistic", "mean_tau", "exact_mean_tau", "mean_ci", "verdict", "dtype", "expected"}
    assert all(keys <= set(r) for r in rows)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"lossless", "conformance", "planted"}
    assert all(r["N"] == 30000 and r["alpha"] == 1e-6 and 0 < r["detectable_delta_pooled"] < 0.1 for r in rows)
    assert all(r["detectable_delta"] == r["detectable_delta_pooled"] + r["pooled_mass"] for r in rows)
    lossless = [r for r in rows if r["kind"] != "planted"]
    assert all(r["passed"] and r["caught"] is None and r["pvalue"] >= 1e-6 for r in lossless)
    planted = {r["rule"]: r for r in rows if r["kind"] == "planted"}
    # BV's two planted defects, the released rule's own one and the released rule against the
    # target law, all caught
    assert set(planted) == {"planted_bv_shared_uniform", "planted_bv_first_failure",
                            "planted_spectr_gbv_shared_coins", "spectr_gbv"}
    assert all(r["caught"] is True and not r["passed"] and r["pvalue"] < 1e-6 for r in planted.values())
    # every lossless row that compares mean τ has its exact mean inside the reported interval
    for r in rows:
        if r["mean_ci"] is not None and r["kind"] != "planted":
            assert r["mean_ci"][0] <= r["exact_mean_tau"] <= r["mean_ci"][1]
    # bv: toy float32 + bfloat16, branch coverage float32, rows V = 4,096 float32 (quick), law-level
    assert sorted((r["dtype"], r["case"].split()[1]) for r in rows if r["rule"] == "bv") == [
        ("bfloat16", "toy"), ("float32", "coverage"), ("float32", "rows"), ("float32", "toy"), ("float64", "vs")]
    assert "CERTIFIED" in out and "NOT CERTIFIED" not in out and "planted_bv_first_failure" in out
    text = md.read_text()
    assert not text.startswith("#")  # embedded under a heading by `spectr-gbv report`
    assert "| kind | rule | case |" in text and text.count("| planted |") == 4


class RaisingBV(BlockVerification):
    def decide(self, batch, noise):
        raise RuntimeError("deliberately broken")


@pytest.mark.parametrize("rule,wrong,verdict", [
    ("bv", FirstFailureBV, "FAIL"),
    ("spectr", UnscaledSpecTr, "FAIL"),
    ("bv", RaisingBV, "FAIL"),
], ids=["bv-first-failure", "spectr-rho1", "bv-raises"])
def test_nonzero_exit_when_a_lossless_rule_is_wrong(rule, wrong, verdict, monkeypatch, tmp_path, capsys):
    """The registry's rule replaced by a wrong one (the registry is read when the CLI runs). A
    verifier that raises is a verdict too: a FAIL row whose failed check names the error."""
    from spectr_gbv.gpu_backend.verifiers.base import VERIFIER_CLASSES

    monkeypatch.setitem(VERIFIER_CLASSES, type(registry.spec(rule).reference()), wrong)
    js = tmp_path / "c.json"
    code, out, _ = certify(["--rules", rule, "--quick", "--samples", N, "--json", str(js)], capsys)
    assert code == 1
    rows = [r for r in json.loads(js.read_text()) if r["kind"] == "lossless"]
    assert any(r["verdict"] == verdict for r in rows), [(r["case"], r["verdict"]) for r in rows]
    if wrong is RaisingBV:
        assert all(r["error"] is None for r in rows)
        assert any("deliberately broken" in c for r in rows for c in r["failed_checks"]), rows
    assert "NOT CERTIFIED" in out


def test_missed_planted_rule_fails(monkeypatch, tmp_path, capsys):
    """A planted defect that is not caught (here: 'planted' as the correct BV) fails the run."""
    from spectr_gbv.gpu_backend.verifiers.base import PLANTED_CLASSES

    monkeypatch.setitem(PLANTED_CLASSES, "planted_bv_first_failure", BlockVerification)
    js = tmp_path / "c.json"
    code, _, _ = certify(["--rules", "bv", "--quick", "--samples", N, "--json", str(js)], capsys)
    assert code == 1
    row = next(r for r in json.loads(js.read_text()) if r["rule"] == "planted_bv_first_failure")
    assert row["verdict"] == "MISSED" and row["caught"] is False


@pytest.mark.parametrize("argv,message", [
    (["--rules", "bv,no_such_rule"], "unknown rule(s) no_such_rule; registered rules: sd, "),
    (["--rules", " , "], "at least one rule"),
    (["--samples", "0"], "--samples must be >= 2"),
    (["--samples", "1"], "--samples must be >= 2 (the mean test needs 2 samples)"),
    (["--device", "meta"], "--device 'meta' is not usable"),
    (["--alpha", "1.5"], "--alpha must lie in (0, 1)"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--device", "nonsense"], "--device 'nonsense' is not usable"),
])
def test_argument_errors_exit_2(argv, message, capsys):
    code, out, err = certify(argv, capsys)
    assert code == 2 and message in err and out == ""


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_every_planted_rule_is_caught_and_the_correct_rule_passes(name):
    """Each planted torch rule is caught on its case, and its base rule passes the same case."""
    planted = PLANTED[name]
    case = suite.planted_case(planted)
    bad = certify_case(suite_verifier(name, torch.float32), case, 5000, 1e-6, 16384)
    assert bad.verdict == "CAUGHT" and min(bad.pvalue_joint, bad.pvalue_tau) < 1e-40
    case.rule, case.expect_pass = planted.base, True
    good = certify_case(suite_verifier(planted.base, torch.float32), case, 5000, 1e-6, 16384)
    assert good.verdict == "PASS"


def test_law_level_cases():
    """The released rule is caught against the target's first-token law at K = L = 2 and a
    lossless multi-draft rule passes it (N = 5·10^4: TV 0.024 against a detectable 0.018)."""
    backend = {r: suite_verifier(r, torch.float64) for r in ("spectr_gbv", "kseq_gbv")}
    released = certify_case(backend, released_rule_against_target(2, 2), 50_000, 1e-6, 4096)
    assert released.verdict == "CAUGHT"
    assert certify_case(backend, lossless_against_target("kseq_gbv", 2, 2), 50_000, 1e-6, 4096).verdict == "PASS"


def test_report_certify_part_gets_the_markdown(monkeypatch, tmp_path):
    """``spectr-gbv report`` runs ``certify verifiers --quick --markdown FILE`` and embeds the file."""
    from spectr_gbv.cli.report import certify_part

    monkeypatch.setattr(registry, "_SPECS", {"sd": registry.spec("sd")})
    monkeypatch.setattr(certification, "QUICK_N", {k: 3000 for k in certification.QUICK_N})
    part = certify_part(str(tmp_path))
    assert part.status == "passed", part.body
    assert "| lossless | sd | toy V=3 K=1 L=3 float32 |" in part.body
    assert (tmp_path / "certify.md").is_file()


def test_plan_covers_every_registered_rule_and_planted_defect():
    """--quick still covers every registered rule (toy and V = 4,096 rows) and every planted
    defect; the full plan adds bfloat16 rows and the non-modifying multi-draft rules' distinctive cases.
    (Only the plan is built: no case is run.)"""
    rules = list(registry.names())
    for quick in (True, False):
        entries = certification.plan(rules, quick)
        for rule in rules:
            sizes = {e.size for e in entries if e.rule == rule and e.kind != "planted"}
            assert {"toy", "rows"} <= sizes, rule
        planted = {e.rule for e in entries if e.kind == "planted"}
        assert set(PLANTED) | {"spectr_gbv", "spectr_gbv_fixed"} <= planted
    quick_rows = [e for e in certification.plan(rules, True) if e.size in ("rows", "rows_bf16")]
    full_rows = [e for e in certification.plan(rules, False) if e.size in ("rows", "rows_bf16")]
    assert len(full_rows) > len(quick_rows) == len(rules)
    assert {e.size for e in quick_rows} == {"rows"}  # the bfloat16 rows are the full plan's


def test_third_party_vllm_without_an_environment_is_refused_in_one_line(monkeypatch, capsys):
    """No vLLM here and no .venv-vllm: exit 2 naming the install command; --families belongs to
    ``certify samplers``; an unknown family is named."""
    from spectr_gbv.cli import main as cli_main
    from spectr_gbv.certify.samplers import vllm as vc

    monkeypatch.setattr(vc, "importable_here", lambda: False)
    monkeypatch.setattr(vc, "locate_python", lambda: None)
    assert cli_main.main(["certify", "samplers", "vllm"]) == 2
    assert "scripts/install.sh --vllm" in capsys.readouterr().err
    assert cli_main.main(["certify", "verifiers", "--families", "toy"]) == 2
    assert "unrecognized arguments: --families" in capsys.readouterr().err
    monkeypatch.setattr(vc, "locate_python", lambda: "/bin/true")
    assert cli_main.main(["certify", "samplers", "vllm", "--families", "toy,nosuch"]) == 2
    assert "--families: unknown family 'nosuch'" in capsys.readouterr().err
    assert cli_main.main(["certify", "samplers", "vllm", "--quick"]) == 2
    assert "unrecognized arguments: --quick" in capsys.readouterr().err


def test_the_cli_defaults_agree_with_the_library():
    """cli/certify_verifiers.py repeats certify.verifiers.run's defaults (so that --help imports
    no torch)."""
    assert (verifiers_cli.DEFAULT_ALPHA, verifiers_cli.FULL_N, verifiers_cli.FULL_N_ROWS) == (
        certification.DEFAULT_ALPHA, certification.FULL_N, certification.FULL_N_ROWS)


def test_vllm_plan_and_table_without_vllm():
    """The plan covers every family for the samplers expected to pass and the synthetic
    families for the lossy ones; the table names the failed test and the measured TV."""
    from spectr_gbv.certify.samplers import vllm as vc
    from spectr_gbv.oracle.certify_cases import FAMILIES

    jobs = vc.plan()
    plain = [s for s in vc.SAMPLERS if not s.synthetic]
    assert len(plain) == 8 and sum(s.native for s in plain) == 2  # v1 twice more, as the CPU engine runs it
    assert all(s.kind == "v1" and not s.synthetic for s in vc.SAMPLERS if s.native)
    # every public family with a K = 1 case for the sampler's rule: not "branches" (K >= 2), nor
    # "distinctive" (sd and bv have no distinctive_seeds), nor "vocab" (V = 151,936: beyond
    # Triton's interpreter, certify/samplers/vllm.py families_for)
    for s in plain:
        assert vc.families_for(s.rule) == tuple(f for f in FAMILIES if f not in ("branches", "distinctive", "vocab"))
    assert len(jobs) == 8 * (len(FAMILIES) - 3) + 2 * len(vc.SYNTHETIC_FAMILIES)
    row = vc.Row("MRV2 x", "sd", "toy", False, False, 2000, 1e-6, 0.09, 0.31, 1e-40, ("joint outcome",), 12.0,
                 implementation=vc.IMPLEMENTATIONS["native-cpu"])
    table = vc.markdown_table([row])
    assert ("| MRV2 x | vLLM's C++ CPU kernels (CpuPlatform overrides), no shim | `sd` | toy | CAUGHT | 2,000 | "
            "0.090 | 0.310 | 1e-40 | joint outcome | 12 s |") in table
    assert vc.implementation(True) == vc.IMPLEMENTATIONS["native-cpu"]


def test_published_vllm_run():
    """benchmarks/VLLM_CERTIFY.md holds ``pivot_markdown`` of the published run
    (benchmarks/VLLM_CERTIFY.json, written by ``certify samplers vllm --json``) and README
    links it.  The run covers today's plan (every family of ``families_for`` per sampler, the
    synthetic families, two deterministic checks per sampler kind and code path); every row
    through the Triton kernels is as expected (certified, synthetic caught); every row through
    vLLM's C++ CPU kernels (the CPU engine's path) fails
    (docs/upstream/vllm_cpu_expand_uninitialised_temperatures.md)."""
    import json
    import os

    from spectr_gbv.certify.samplers import vllm as vc

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "benchmarks", "VLLM_CERTIFY.json")) as fh:
        rows = vc.rows_from_json(json.load(fh))
    with open(os.path.join(root, "benchmarks", "VLLM_CERTIFY.md")) as fh:
        assert vc.pivot_markdown(rows) in fh.read()
    with open(os.path.join(root, "README.md")) as fh:
        assert "benchmarks/VLLM_CERTIFY.md" in fh.read()
    native = vc.IMPLEMENTATIONS["native-cpu"]
    triton = [r for r in rows if r.implementation != native]
    cpu_path = [r for r in rows if r.implementation == native]
    assert triton and all(r.ok for r in triton) and {r.verdict for r in triton} == {"PASS", "CAUGHT"}
    assert cpu_path and all(r.verdict == "FAIL" for r in cpu_path)
    kinds = {(s.kind, s.one_hot, s.native) for s in vc.SAMPLERS}
    assert len(rows) == len(vc.plan()) + 2 * len(kinds)
    assert {r.family for r in rows} == set(f for s in vc.SAMPLERS for f in vc.families_for(s.rule)) | {
        "replay", "batch independence"}
