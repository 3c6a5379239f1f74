"""``spectr-gbv oracle`` prints every oracle value; --json stays parseable (HiGHS banner silenced)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def oracle_json(K, L):
    out = subprocess.run([sys.executable, "-m", "spectr_gbv.cli.main", "oracle", "--K", str(K), "--L", str(L),
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
    assert v["prefix_match_ceiling"] == pytest.approx(134 / 81, abs=1e-12)  # docs/bounds.md §6: tight here
    assert v["alpha_star"] is None


def test_oracle_toy_L1_alpha_star():
    v = oracle_json(2, 1)
    assert v["alpha_star"] == pytest.approx(8 / 9, abs=1e-12)
    assert v["global_ot_optimum"] == pytest.approx(8 / 9, abs=1e-9)
    assert v["prefix_match_ceiling"] == pytest.approx(8 / 9, abs=1e-12)


def test_oracle_not_solved_is_null_in_json_and_exit_1():
    """A --time-limit too small for the solvers: the optima not reached are null (strict JSON,
    never a bare NaN), one line on stderr names them and --time-limit, and the exit status is 1."""
    proc = subprocess.run([sys.executable, "-m", "spectr_gbv.cli.main", "oracle", "--K", "2", "--L", "2",
                           "--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json"),
                           "--time-limit", "1e-9", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "NaN" not in proc.stdout
    v = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert v["bound_B"] == pytest.approx(19 / 12, abs=1e-12)
    unsolved = [k for k in ("cic", "cic_block", "global_ot", "no_modification") if v[f"{k}_optimum"] is None]
    assert unsolved, v  # at 1e-9 s no solver reaches its optimum
    lines = [line for line in proc.stderr.splitlines() if line.startswith("spectr-gbv oracle: ")]
    assert len(lines) == 1 and "not solved to optimality" in lines[0] and "--time-limit" in lines[0]
    assert all(k in lines[0] for k in unsolved)
    assert "Traceback" not in proc.stderr


def test_json_safe_maps_non_finite_to_null():
    from spectr_gbv.cli.args import json_safe

    assert json_safe({"a": float("nan"), "b": [1.5, float("inf")], "c": {"d": -float("inf")}, "e": "x"}) == \
        {"a": None, "b": [1.5, None], "c": {"d": None}, "e": "x"}
