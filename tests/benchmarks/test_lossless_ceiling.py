"""benchmarks/lossless_ceiling.py end to end on the tiny model as target and draft: with draft =
target every window's estimate is exactly 1 at every depth (P = Q), so the ceiling is L + 1 for
every K and L, and every rule accepts every draft token (τ = L each iteration); the texts are the rules' outputs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.models
def test_script_ceiling_and_measured_on_draft_equal_target(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lossless_ceiling.py"), "--prompts", "1", "--datasets",
         "humaneval", "--max-new-tokens", "10", "--target", "tiny", "--draft", "tiny", "--dtype", "float32",
         "--K", "1", "3", "--L", "2", "4", "16", "--rules", "spectr", "bv", "--main", "3x4",
         "--json", str(tmp_path / "c.json"), "--md", str(tmp_path / "c.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    (prompt,) = data["prompts"]
    assert prompt["set"] == "humaneval" and sorted(prompt["texts"]) == ["bv", "spectr"]
    assert all(len(text) == 10 for text in prompt["texts"].values())
    for rule, ceiling in prompt["ceiling"].items():
        # L = 16 exceeds the 10-token text: no window
        assert sorted(ceiling) == ["1x2", "1x4", "3x2", "3x4"]
        for key, (mean, depths) in ceiling.items():
            L = int(key.split("x")[1])
            assert mean == pytest.approx(L + 1, abs=1e-12) and depths == pytest.approx([1.0] * L, abs=1e-12)
    assert [r["K"] for r in data["rules"]] == [3, 1]
    assert all(t == 4 for taus in prompt["measured"].values() for t in taus)
    table = out.stdout.splitlines()
    assert "| 3 | 3.00 | 5.00 | n/a |" in table
    assert "| `spectr` | 3 | 4 | 5.00 | 5.00 | 0.00 | 1.000 |" in table
    assert (tmp_path / "c.md").read_text(encoding="utf-8").strip() == out.stdout.strip()


@pytest.mark.parametrize("args,match", [
    (["--rules", "nope"], "--rules: "),
    (["--rules", "spectr_gbv"], "--rules: 'spectr_gbv' is not lossless"),
    (["--main", "2by4"], "--main: expected KxL"),
    (["--K", "0"], "--K and --L must be >= 1"),
    (["--temperature", "0"], "--temperature must be >= 1e-4"),
])
def test_bad_arguments_are_one_line_exit_2(args, match):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lossless_ceiling.py"), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and match in out.stderr and "Traceback" not in out.stderr
