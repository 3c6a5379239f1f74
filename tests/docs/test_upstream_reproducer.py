"""docs/upstream/repro_llamacpp_kv_cell_order.py reproduces the llama.cpp KV-cell ordering defect
on the embedded SmolLM2 GGUF: exit status 1, the out-of-order difference > 1e-3 and the in-order
control bit-identical (if llama.cpp fixes it, this test fails and the report must be updated)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "upstream" / "repro_llamacpp_kv_cell_order.py"


def test_reproducer_reproduces(tmp_path):
    from spectr_gbv.gpu_backend.llamacpp.pair import gguf_path

    gguf = shutil.copy(gguf_path("tiny"), tmp_path / "tiny.gguf")
    run = subprocess.run([sys.executable, str(SCRIPT), str(gguf)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith(str(gguf)))
    bad = float(line.split("cells out of order ")[1].split(",")[0])
    good = float(line.split("cells in order ")[1].split(" ")[0])
    assert bad > 1e-3 and good == 0.0, line


def test_reproducer_usage():
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "usage" in run.stdout
