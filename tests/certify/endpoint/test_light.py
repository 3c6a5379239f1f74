"""The endpoint certifier is light: importing any module of certify/endpoint/ or certify/log/ (and
the CLI's ``certify endpoint`` and ``certify log`` paths) loads neither torch, transformers nor llama_cpp — the light install
(``pip install spectr-gbv``: numpy, scipy, tqdm, msgspec) runs it.  Checked in a fresh interpreter (this
test process has torch loaded already).  Seen to fail on a planted ``import torch`` at the top of
certify/endpoint/report.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "transformers", "llama_cpp", "cvxpy")


def _loaded_heavy(modules: list[str]) -> dict:
    code = ("import json, sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            f"print(json.dumps(sorted({{k.split('.')[0] for k in sys.modules}} & set({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_endpoint_module_imports_without_torch():
    modules = sorted(f"spectr_gbv.certify.endpoint.{p.stem}" for p in (ROOT / "certify" / "endpoint").glob("*.py")
                     if p.stem != "__init__")
    assert len(modules) >= 8
    assert _loaded_heavy(modules) == []


def test_every_log_module_imports_without_torch():
    """``certify log`` (certify/log/) is light too."""
    modules = sorted(f"spectr_gbv.certify.log.{p.stem}" for p in (ROOT / "certify" / "log").glob("*.py")
                     if p.stem != "__init__")
    assert len(modules) >= 5
    assert _loaded_heavy(modules + ["spectr_gbv.cli.certify_log"]) == []


def test_the_light_cli_path_imports_without_torch():
    """The parser (every sub-command registered), the endpoint and log commands, ``exact`` and the harness."""
    mods = ["spectr_gbv.cli.main", "spectr_gbv.cli.certify_endpoint", "spectr_gbv.cli.certify_log", "spectr_gbv.cli.exact",
            "spectr_gbv.oracle.harness", "spectr_gbv.oracle.lossless"]
    assert _loaded_heavy(mods) == []
    code = ("import sys\nfrom spectr_gbv.cli.main import build_parser\nbuild_parser()\n"
            f"print(sorted({{k.split('.')[0] for k in sys.modules}} & set({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
