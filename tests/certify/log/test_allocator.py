"""``certify.log.allocator.keep_freed_memory``: sets glibc's thresholds where glibc is the C
library (in a fresh interpreter: the setting lasts for the process), does nothing elsewhere, and
changes no result (a tally with and without it is the same)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_CODE = """
import json, sys
sys.path.insert(0, "tests")
from helpers.recorded_logs import make_log
from spectr_gbv.certify.log.allocator import keep_freed_memory
from spectr_gbv.certify.log.run import LogPlan, tally_lines
make_log(sys.argv[2], 40, seed=4)
lines = list(enumerate(open(sys.argv[2], "rb")))
kept = keep_freed_memory() if sys.argv[1] == "on" else None
print(json.dumps({"kept": kept, "again": keep_freed_memory() if kept else None,
                  "tally": tally_lines(lines, LogPlan(vocab=64)).to_json()}))
"""


def _run(mode: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CODE, mode, str(path)], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thresholds_set_on_glibc_and_no_result_changes(tmp_path):
    on, off = _run("on", tmp_path / "a.jsonl"), _run("off", tmp_path / "b.jsonl")
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert on["kept"] is True and on["again"] is True
    else:
        assert on["kept"] is False
    assert on["tally"] == off["tally"]
