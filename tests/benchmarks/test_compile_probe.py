"""benchmarks/compile_probe.py refuses bad arguments in one line, exit 2, before loading a model
(a real probe compiles for minutes, so it is run by hand: benchmarks/COMPILE_PROBE.md)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args,match", [
    (["--steps", "2"], "--steps must be >= 3"),
    (["--context", "0"], "argument --context: must be >= 1"),
    (["--reps", "1.5"], "argument --reps"),
    (["--dtype", "foo"], "argument --dtype: must be one of"),
    (["--md", "/nonexistent/p.md"], "argument --md: cannot write"),
    (["--quant", "int8", "--dtype", "bfloat16"], "--quant int8 needs --dtype float32"),
    (["--quant", "int4"], "invalid choice: 'int4'"),
])
def test_bad_arguments(args, match):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile_probe.py"), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and match in out.stderr and "Traceback" not in out.stderr
