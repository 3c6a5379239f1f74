"""``spectr-gbv oracle`` prints every oracle value; --json stays parseable (HiGHS banner silenced)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def oracle_json(K, L):
    out = subprocess.run([sys.executable, "-m", "spectr_gbv_cli", "oracle", "--K", str(K), "--L", str(L),
                          "--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json"),
                          "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_oracle_toy_K2_L2():
    v = oracle_json(2, 2)
    assert v["bound_B"] == pytest.approx(19 / 12, abs=1e-12)
    assert v["cic_optimum"] == pytest.approx(19 / 12, abs=1e-6)
    assert v["cic_block_optimum"] == pytest.approx(31 / 20, abs=1e-6)
    assert v["global_ot_optimum"] == pytest.approx(134 / 81, abs=1e-9)
    assert v["no_modification_optimum"] == pytest.approx(131 / 81, abs=1e-9)
    assert v["alpha_star"] is None


def test_oracle_toy_L1_alpha_star():
    v = oracle_json(2, 1)
    assert v["alpha_star"] == pytest.approx(8 / 9, abs=1e-12)
    assert v["global_ot_optimum"] == pytest.approx(8 / 9, abs=1e-9)
