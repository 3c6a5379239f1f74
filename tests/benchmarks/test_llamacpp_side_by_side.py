"""benchmarks/llamacpp_side_by_side.py runs end to end on the tiny GGUF (target and draft, one
HumanEval prompt, 4 tokens): one row per method, generate's default decided per prompt and
running what it decided, and the tables re-rendered from the saved runs are the same."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("llama_cpp")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "llamacpp_side_by_side.py"
METHODS = ["llama.cpp plain", "ours llama.cpp plain", "ours llama.cpp default", "ours llama.cpp K=2 L=4"]


@pytest.mark.long  # deselected by default: `pytest -m long` (benchmarks/CI_TIMES.md)
@pytest.mark.models
def test_script_prints_every_method_and_the_per_prompt_decision(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--prompts", "1", "--max-new-tokens", "4", "--datasets", "humaneval",
         "--target", "tiny", "--draft", "tiny", "--json", str(tmp_path / "runs.json"), "--md", str(tmp_path / "t.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "SPECTR_GBV_AUTOCONFIG": str(tmp_path / "autoconfig.json")})
    if "FileNotFoundError" in out.stderr and "data" in out.stderr:
        pytest.skip("the tiny GGUF's data wheel is not installed")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split(" | ")[0][2:] for line in out.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| method")]
    assert rows == METHODS + METHODS  # the pooled table, then the per-set table
    assert "llama.cpp: llama-cpp-python 0.3.36; built with " in out.stdout
    decided = [line for line in out.stdout.splitlines()
               if line.startswith("`ours llama.cpp default` decided per prompt (the draft's prefill counted)")]
    assert len(decided) == 1 and decided[0].endswith(" of 1 generations."), out.stdout
    runs = [r for r in json.loads((tmp_path / "runs.json").read_text())["runs"] if r["method"] == "ours llama.cpp default"]
    assert len(runs) == 1 and 1 <= runs[0]["tokens"] <= 4
    n = runs[0]["tokens"]
    if "plain sampling in 1 of 1" in decided[0]:
        assert runs[0]["calls"] == n  # one target call per token
    else:
        L = int(re.search(r"K=\d+ L=(\d+) in 1 of 1", decided[0]).group(1))
        assert -(-n // (L + 1)) <= runs[0]["calls"] <= n
    assert (tmp_path / "t.md").read_text(encoding="utf-8").strip() == out.stdout.strip()
    again = subprocess.run([sys.executable, str(SCRIPT), "--from-json", str(tmp_path / "runs.json")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == out.stdout.strip()
