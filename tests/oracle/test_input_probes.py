"""Impossible inputs in draft rows (oracle/input_probes.py; the expected behaviour, refusal with
ValueError, in reference/contract.py): NaN, ±inf, negative and unnormalised draft rows, a drafted
token of draft probability 0, and NaN in a target row.

A from-scratch SD (tests/helpers/scratch_verifiers.py) whose acceptance ratio is numpy.fmin(1,
q/p) — NaN-ignoring, so a draft of draft probability NaN is accepted (min(1, q/NaN) = 1) — and
which checks nothing passes every statistical family (its rows are valid there) and is rejected
by the public defaults with a verdict: failed probes in ``certify_verifier``'s and
``certify_lossless``'s reports, ``assert_lossless``'s CertificationFailed naming them.  Its twin,
which refuses such rows, passes.  The probes are deterministic (false alarm 0 for a verifier that
refuses as the contract says); the statistical runs here are at N = 4,000, α = 1e-6 per case.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.scratch_verifiers import nan_accepting_sd, sd
from spectr_gbv.oracle.harness import PROBES, boundary_probes, certify_lossless, certify_verifier
from spectr_gbv.oracle.input_probes import INPUT_PROBES, corrupted, input_probes, probe_rows
from spectr_gbv.oracle.pytest_plugin import CertificationFailed, assert_lossless
from spectr_gbv.reference.rules import RULES

N = 4_000
NAMES = [name for name, _, _ in INPUT_PROBES]


def test_the_probe_rows():
    """Row 0 is a valid toy case, row 1 its corrupted copy, one corruption per probe."""
    base = probe_rows(1, 3)
    x = int(base[0][1, 0, 0])
    for name in NAMES:
        tokens, dp, tp = corrupted(base, name)
        assert np.array_equal(dp[0], base[1][0]) and np.array_equal(tp[0], base[2][0])
        row = dp[1, 0, 0]
        if name == "NaN in draft_probs":
            assert np.isnan(row[x])
        elif name == "negative draft_probs":
            assert row.min() == -0.25 and row.sum() == pytest.approx(1.0, abs=1e-15)
        elif name == "unnormalised draft_probs":
            assert row.sum() == pytest.approx(2.0, abs=1e-14)
        elif name == "drafted token of draft probability 0":
            assert row[x] == 0.0 and row.sum() == pytest.approx(1.0, abs=1e-15)
        elif name == "NaN in target_probs":
            assert np.isnan(tp[1, 0, 0, x]) and np.isfinite(dp).all()


def test_the_twin_and_the_reference_refuse_every_probe():
    for verifier, K in ((sd, 1), (RULES["sd"], 1), (RULES["spectr"], 2)):
        probes = input_probes(verifier, K=K)
        assert [p.name for p in probes] == NAMES
        assert all(p.passed and "ValueError" in p.detail for p in probes), [(p.name, p.detail) for p in probes]


def test_a_verifier_that_checks_nothing_fails_every_probe():
    probes = {p.name: p for p in input_probes(nan_accepting_sd)}
    assert not any(p.passed for p in probes.values())
    nan = probes["NaN in draft_probs"]
    # row 1 (the corrupted one) accepted its first draft, whose draft probability is NaN
    assert "instead of raising ValueError naming draft_probs" in nan.detail
    out = nan_accepting_sd(*corrupted(probe_rows(1, 3), "NaN in draft_probs"), seeds=np.array([1234, 5678]))
    assert out.tau[1] >= 1

    def crashes(draft_tokens, draft_probs, target_probs, *, seeds):
        if not np.isfinite(draft_probs).all():
            raise RuntimeError("probability tensor contains nan")
        return sd(draft_tokens, draft_probs, target_probs, seeds=seeds)

    crash = {p.name: p for p in input_probes(crashes)}
    assert not crash["NaN in draft_probs"].passed and "raised RuntimeError" in crash["NaN in draft_probs"].detail
    assert crash["negative draft_probs"].passed  # sd's own check refuses it


def test_the_public_defaults_reject_it_with_a_verdict():
    report = certify_verifier(nan_accepting_sd, "sd", K=1, L=3, n_samples=N)
    assert all(r.passed for r in report.results), report.table()  # its law on valid rows is SD's
    assert not report.ok and [p.name for p in report.probes if not p.passed] == NAMES
    assert "| input probe | verdict | detail |" in report.table()
    with pytest.raises(CertificationFailed, match="does not refuse an impossible input .*, NaN in draft_probs"):
        assert_lossless(nan_accepting_sd, "sd", K=1, L=3, families=("toy",), n_samples=N)
    lossless = certify_lossless(nan_accepting_sd, K=1, L=3, n_samples=N)
    assert lossless.failed == {"input probes": tuple(NAMES)}
    twin = certify_verifier(sd, "sd", K=1, L=3, families=("toy", "zeros"), n_samples=N)
    assert twin.ok and len(twin.probes) == len(NAMES)
    off = certify_verifier(nan_accepting_sd, "sd", K=1, L=3, families=("toy",), n_samples=N, input_checks=False)
    assert off.ok and off.probes == [] and any("input_checks=False" in line for line in off.not_seen)


def test_boundary_probes_include_them():
    probes = boundary_probes(RULES["sd"], "sd", K=1)
    assert [p.name for p in probes][len(PROBES):] == NAMES and all(p.passed for p in probes)
