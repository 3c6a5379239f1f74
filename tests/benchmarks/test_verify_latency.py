"""benchmarks/verify_latency.py at a small vocabulary: the fixed-plan column, identical drafts,
the ratio table, the JSON, and its argument errors (the real run is by hand:
benchmarks/VERIFY_MDBV_KSEQ.md)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import verify_latency  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "verify_latency.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_identical_drafts_repeat_draft_zero():
    tok, dp, tp = verify_latency.make_inputs(2, 3, 2, 50, torch.float32, torch.device("cpu"), identical=True)
    for k in (1, 2):
        assert torch.equal(tok[:, k], tok[:, 0]) and torch.equal(dp[:, k], dp[:, 0]) and torch.equal(tp[:, k], tp[:, 0])
    tok, _, _ = verify_latency.make_inputs(2, 3, 2, 50, torch.float32, torch.device("cpu"))
    assert not torch.equal(tok[:, 1], tok[:, 0])


def test_fixed_plan_column_and_json(tmp_path):
    out_json = tmp_path / "v.json"
    out = run("--V", "600", "--K", "2", "--L", "2", "--runs", "5", "--warmup", "1", "--device", "cpu",
              "--rules", "spectr", "mdbv_kseq", "mdbv_kseq_fixed", "--drafts", "identical", "--quick",
              "--json", str(out_json))
    assert out.returncode == 0, out.stderr
    assert "identical drafts" in out.stdout
    assert "mdbv_kseq_fixed / SpecTr" in out.stdout
    data = json.loads(out_json.read_text())
    assert data["drafts"] == "identical"
    row = data["results"][0]
    assert set(row["rules"]) == {"spectr", "mdbv_kseq", "mdbv_kseq_fixed"} and row["K"] == 2 and row["L"] == 2


@pytest.mark.parametrize("args,match", [
    (["--rules", "spectr", "nope"], "unknown rule(s) nope"),
    (["--rules", "mdbv_kseq"], "--rules must include spectr"),
    (["--drafts", "shared"], "argument --drafts: invalid choice"),
    (["--runs", "3"], "--runs must be >= 5"),
    (["--K", "0"], "argument --K"), (["--L", "-1"], "argument --L"), (["--V", "0"], "argument --V"),
    (["--V", "1"], "--V must be >= 2"), (["--threads", "-1"], "argument --threads"),
    (["--warmup", "-3"], "argument --warmup"), (["--max-gb", "-1"], "argument --max-gb"),
    (["--max-gb", "nan"], "argument --max-gb"), (["--json", "/proc/nope/x.json"], "argument --json"),
    (["--rules", "spectr", "spectr"], "a rule is named twice"),
])
def test_bad_arguments(args, match):
    if args == ["--V", "1"] or args[0] == "--rules":
        args = args + ["--device", "cpu"]
    out = run(*args)
    assert out.returncode == 2 and match in out.stderr and "Traceback" not in out.stderr


def test_cuda_refused_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = run("--device", "cuda")
    assert out.returncode == 2 and "CUDA is not available" in out.stderr and "Traceback" not in out.stderr
