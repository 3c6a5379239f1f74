"""benchmarks/lossless_ceiling.py end to end on the tiny model as target and draft: with draft =
target every window's estimate is exactly 1 at every depth (P = Q), so the ceiling is L + 1 for
every K and L, and every rule accepts every draft token (τ = L each iteration); the texts are the rules' outputs."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long  # deselected by default: `pytest -m long` (benchmarks/CI_TIMES.md)
@pytest.mark.models
def test_script_ceiling_and_measured_on_draft_equal_target(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lossless_ceiling.py"), "--prompts", "1", "--datasets",
         "humaneval", "--max-new-tokens", "10", "--target", "tiny", "--draft", "tiny", "--dtype", "float32",
         "--K", "1", "--L", "2", "16", "--rules", "spectr", "bv", "--main", "3x4",
         "--json", str(tmp_path / "c.json"), "--md", str(tmp_path / "c.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    # --main's K and L join the grid, so that every table has its shape
    assert data["grid"] == {"K": [1, 3], "L": [2, 4, 16]}
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
    assert "| `spectr` | 3 | 4 | 2 | 5.00 | 5.00 | 0.00 | 1.000 | 5.00 |" in table
    assert (tmp_path / "c.md").read_text(encoding="utf-8").strip() == out.stdout.strip()


def _script():
    spec = importlib.util.spec_from_file_location("lossless_ceiling", ROOT / "benchmarks" / "lossless_ceiling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_iteration_pairs_by_hand():
    """Starts at 0, τ_0 + 1 = 2, then 2 + 1 = 3; the third iteration (start 3) has a window
    past the 4-token text; each estimate is 1 + Σ_i min(1, (1 − (1 − P_i)^K) / Q_i)."""
    q, p = [0.5, 0.5, 0.8, 0.5], [0.25, 1.0, 0.4, 0.5]
    ceil, measured = _script().iteration_pairs(q, p, [1, 0, 2], K=1, L=2)
    # start 0: P = 0.25, 0.25; Q = 0.5, 0.25 -> 0.5 + 1;  start 2: P = 0.4, 0.2; Q = 0.8, 0.4 -> 0.5 + 0.5
    assert ceil == pytest.approx([2.5, 2.0], abs=1e-15) and measured == [2, 1]
    assert _script().iteration_pairs(q[:1], p[:1], [0], K=1, L=2) == ([], [])


def test_from_json_rerenders_the_tables(tmp_path):
    run = [sys.executable, str(ROOT / "benchmarks" / "lossless_ceiling.py")]
    out = subprocess.run(run + ["--prompts", "1", "--datasets", "humaneval", "--max-new-tokens", "8", "--target",
                                "tiny", "--draft", "tiny", "--dtype", "float32", "--K", "2", "--L", "3",
                                "--rules", "spectr", "--main", "2x3", "--json", str(tmp_path / "c.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    again = subprocess.run(run + ["--from-json", str(tmp_path / "c.json"), "--md", str(tmp_path / "c.md")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == out.stdout
    # draft = target: 8 tokens in iterations of 4 (starts 0 and 4; the second's window fits)
    assert "| `spectr` | 2 | 3 | 2 | 4.00 | 4.00 | 0.00 | 1.000 | 4.00 |" in again.stdout.splitlines()


@pytest.mark.parametrize("content", ['{"args": {}, "header": [], "rules": [], "prompts": []}',
                                     '{"args": {"K": [1], "L": [2], "main": [1, 2]}, "header": "x", "rules": [], '
                                     '"prompts": []}',
                                     '{"args": {"K": [1], "L": [2], "main": [1, 2]}, "header": [], '
                                     '"rules": [{"name": "sd", "K": 1, "L": 2}], "prompts": [{"ceiling": []}]}',
                                     '[1, 2]', 'not json'])
def test_from_json_of_the_wrong_shape_is_one_line_exit_2(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lossless_ceiling.py"), "--from-json", str(bad)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--from-json: cannot read a run from" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args,match", [
    (["--rules", "nope"], "--rules: "),
    (["--rules", "spectr_gbv"], "--rules: 'spectr_gbv' is not lossless"),
    (["--main", "2by4"], "--main: expected KxL"),
    (["--K", "0"], "argument --K: must be >= 1, got 0"),
    (["--temperature", "0"], "argument --temperature: must be > 0"),
    (["--temperature", "nan"], "argument --temperature: must be a finite number"),
    (["--dtype", "foo"], "argument --dtype: must be one of"),
    (["--md", "/nonexistent/c.md"], "argument --md: cannot write /nonexistent/c.md"),
    (["--datasets", "/nonexistent/prompts.jsonl"], "--datasets: "),
    (["--from-json", "/nonexistent/c.json"], "--from-json: cannot read a run from /nonexistent/c.json"),
])
def test_bad_arguments_are_one_line_exit_2(args, match):
    """Each refused before any model is loaded: one line naming the flag, exit 2."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lossless_ceiling.py"), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and match in out.stderr and "Traceback" not in out.stderr
