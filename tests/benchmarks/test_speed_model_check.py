"""benchmarks/speed_model_check.py runs end to end (the tiny model as target and draft, one
HumanEval prompt, 6 tokens) and prints plain sampling and one row per shape."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long  # deselected by default: `pytest -m long` (benchmarks/CI_TIMES.md)
@pytest.mark.models
def test_script_prints_predicted_and_measured(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "speed_model_check.py"), "--shapes", "1x2", "2x2",
         "--prompts", "1", "--datasets", "humaneval", "--max-new-tokens", "6", "--target", "tiny",
         "--draft", "tiny", "--dtype", "float32", "--md", str(tmp_path / "t.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "SPECTR_GBV_AUTOCONFIG": str(tmp_path / "autoconfig.json")})
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split(" | ") for line in out.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| method")]
    assert [r[0][2:] for r in rows] == ["plain sampling", "spectr K=1 L=2", "spectr K=2 L=2"]
    # draft = target: every draft token is accepted, predicted L + 1 tokens per call; measured
    # 6 tokens in 2 calls (3 per call, the second iteration cut at the token cap)
    assert [float(r[1]) for r in rows] == [1.0, 3.0, 3.0]
    assert [float(r[2]) for r in rows] == [1.0, 3.0, 3.0]
    assert (tmp_path / "t.md").read_text(encoding="utf-8").strip() == out.stdout.strip()
