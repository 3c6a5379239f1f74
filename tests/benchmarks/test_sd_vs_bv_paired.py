"""benchmarks/sd_vs_bv_paired.py: its closed forms of E[τ | block] equal the exact engine's."""

import importlib.util
import pathlib

import numpy as np
import pytest

from spectr_gbv.oracle.certify import exact_verdict_law
from spectr_gbv.reference.rules import get_rule

_PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "sd_vs_bv_paired.py"
_spec = importlib.util.spec_from_file_location("sd_vs_bv_paired", _PATH)
paired = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paired)


def _mean_tau(law) -> float:
    return sum(tau * pr for (tau, _, _), pr in law.items())


@pytest.mark.parametrize("seed", range(6))
def test_closed_forms_equal_the_exact_law(seed):
    rng = np.random.default_rng(seed)
    V, L = 5, 3
    dp = rng.dirichlet(np.full(V, 0.7), size=L)
    tp = rng.dirichlet(np.full(V, 0.7), size=L + 1)
    tokens = np.array([rng.choice(V, p=row) for row in dp])
    e_sd, e_bv = paired.expected_taus(tokens, dp, tp)
    args = (tokens[None], dp[None], tp[None])
    assert e_sd == pytest.approx(_mean_tau(exact_verdict_law(get_rule("sd"), *args)), abs=1e-12)
    assert e_bv == pytest.approx(_mean_tau(exact_verdict_law(get_rule("bv"), *args)), abs=1e-12)
