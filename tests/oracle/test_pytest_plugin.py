"""The pytest plugin (oracle/pytest_plugin.py) and the hypothesis strategies (oracle/strategies.py).

A user's test file is run by pytester (in process, the plugin loaded from its pytest11 entry
point): the API guide's (docs/api.md) ``my_sd`` passes ``assert_lossless`` and ``assert_acceptance``
against "sd", the plain-residual bug fails with the case, its p-values, δ and worst cells in the
message, and ``my_sd`` accepts fewer tokens than "bv" (the deployment fixture ``spectr_endpoint``:
tests/certify/endpoint/test_endpoint_fixture.py).  Every certification is seeded, so the outcomes are
deterministic.  The strategies' draws are valid inputs of every reference rule.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# oracle.harness (scipy) is imported here, before pytester's in-process runs: they drop the modules
# they import
from spectr_gbv.oracle.harness import certify_verifier
from spectr_gbv.oracle.pytest_plugin import (DEFAULT_ALPHA, DEFAULT_SAMPLES, CertificationFailed, assert_acceptance,
                                  assert_lossless)
from spectr_gbv.oracle.strategies import KINDS, batched_inputs, verifier_inputs
from spectr_gbv.reference.randomness import SamplingSource
from spectr_gbv.reference.rules import RULES, registry
from spectr_gbv.reference.validation import check_iteration_inputs

pytest_plugins = ["pytester"]

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "certify_your_verifier.py"

USER_TESTS = f'''
import runpy
import numpy as np
from spectr_gbv.oracle.pytest_plugin import assert_acceptance, assert_lossless
from spectr_gbv.reference.contract import BatchVerdict

my_sd = runpy.run_path({str(EXAMPLE)!r})["my_sd"]
FAMILIES = ("toy", "disjoint")

def plain_residual(draft_tokens, draft_probs, target_probs, *, seeds):
    B, _, L = draft_tokens.shape
    tau, tokens = np.zeros(B, dtype=np.int64), np.full((B, L + 1), -1)
    for b in range(B):
        rng = np.random.default_rng(int(seeds[b]) % 2**64)
        x, p, q = draft_tokens[b, 0], draft_probs[b, 0], target_probs[b, 0]
        i = 0
        while i < L and rng.random() < min(1.0, q[i, x[i]] / p[i, x[i]]):
            i += 1
        tokens[b, :i], tokens[b, i], tau[b] = x[:i], rng.choice(len(q[i]), p=q[i] / q[i].sum()), i
    return BatchVerdict(tau, np.zeros(B, dtype=np.int64), tokens, tau + 1)

def test_example_is_lossless():
    report = assert_lossless(my_sd, "sd", families=FAMILIES)
    assert [(r.n, r.alpha) for r in report.results] == [(3000, 1e-5)] * 2

def test_example_accepts_like_sd(spectr_certify):
    assert (spectr_certify.n_samples, spectr_certify.alpha) == (3000, 1e-5)
    spectr_certify.assert_acceptance(my_sd, expected="sd", families=FAMILIES)

def test_plain_residual_is_lossless(spectr_certify):
    spectr_certify.assert_lossless(plain_residual, "sd", families=FAMILIES)

def test_example_accepts_like_bv():
    assert_acceptance(my_sd, expected="bv", families=("toy",))
'''


@pytest.fixture
def user_run(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(test_user=USER_TESTS)
    return pytester


def test_entry_point_is_registered():
    assert any(e.name == "spectr_gbv" and e.value == "spectr_gbv.oracle.pytest_plugin"
               for e in entry_points(group="pytest11"))


def test_user_file_outcomes_and_messages(user_run):
    result = user_run.runpytest("--spectr-samples", "3000", "--spectr-alpha", "1e-5", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "spectr-gbv certification: N = 3000, α = 1e-05 per case" in out  # the report header
    # the bug: named case, p-values, δ, empirical TV and worst cells
    result.stdout.re_match_lines([
        r"E +spectr_gbv.oracle.pytest_plugin.CertificationFailed: verifier is not lossless: it does not follow the "
        r"exact law of the lossless rule 'sd': 2 of 2 cases fail",
        r"E +\| sd toy V=3 K=1 L=3 \| sd \| 3 \| 1 \| 3 \| float64 \| 3000 \| 1e-05 \| .* \| FAIL \|",
        r"E +case 'sd toy V=3 K=1 L=3': FAIL \(N = 3000, α = 1e-05; each of the four tests at α/4\)",
        r"E +p-values: joint 0, law of τ [0-9.e-]+, emitted token given \(τ, prefix\) 0, mean τ [0-9.e-]+",
        r"E +detectable TV δ = 0\.0[0-9]+ \(power 0\.99\); empirical TV = 0\.1[0-9]+",
        r"E +mean τ = [0-9.]+, CI \[[0-9.]+, [0-9.]+\], exact E\[τ\] = 2\.3409",
        r"E +worst cells \(τ, accepted prefix, emitted token\): observed vs expected count",
        r"E +\(\d, \([0-9, ]*\), \d\): \d+ vs 0\.0",
        r"E +case 'sd disjoint V=8 K=1 L=3': FAIL",
    ])
    # acceptance below bv's: case, mean τ, CI and exact E[τ]
    result.stdout.re_match_lines([
        r"E +spectr_gbv.oracle.pytest_plugin.CertificationFailed: verifier's acceptance differs from 'bv''s exact "
        r"E\[τ\] in 1 of 1 cases:",
        r"E +case 'bv toy V=3 K=1 L=3': mean τ = 2\.[0-9]+, CI \[2\.[0-9]+, 2\.[0-9]+\] \(N = 3000, "
        r"α = 1e-05\), exact E\[τ\] of 'bv' = 2\.4674 \(fewer tokens accepted; mean-test p-value [0-9.e-]+\)",
    ])
    assert "FAILED test_user.py::test_plain_residual_is_lossless" in out
    assert "FAILED test_user.py::test_example_accepts_like_bv" in out


def test_api_doc_example_file_passes(pytester, monkeypatch):
    """docs/api.md's "In your own tests" block, run as a test file on the example's my_sd."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    readme = (ROOT / "docs" / "api.md").read_text()
    section = readme.split("## In your own tests (pytest plugin)")[1].split("\n## ")[0]
    block = section.split("```python")[1].split("```")[0]
    assert len(block.strip().splitlines()) <= 12
    pytester.makepyfile(my_package=f"import runpy\nmy_sd = runpy.run_path({str(EXAMPLE)!r})['my_sd']\n",
                        test_readme=block)
    result = pytester.runpytest("--spectr-samples", "3000", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_fixture_defaults_and_bad_options(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(test_defaults=f"""
def test_defaults(spectr_certify):
    assert (spectr_certify.n_samples, spectr_certify.alpha) == ({DEFAULT_SAMPLES}, {DEFAULT_ALPHA!r})
""")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    bad = pytester.runpytest("--spectr-alpha", "2", "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--spectr-alpha must be in (0, 1), got 2.0*"])
    helped = pytester.runpytest("--help")
    helped.stdout.fnmatch_lines(["*--spectr-samples=N*", "*--spectr-alpha=A*"])


# -- the spectr_endpoint fixture (a deployment through its own API) -----------------------------

def test_lossy_rule_message_says_conforms():
    """A lossy registered rule: the claim checked is conformance to its law, not losslessness."""
    assert not registry.spec("spectr_gbv").lossless
    with pytest.raises(AssertionError, match=r"does not conform to the exact law of rule 'spectr_gbv' "
                                             r"\(a lossy rule: this checks conformance to its law") as failed:
        assert_lossless(RULES["spectr"], "spectr_gbv", K=2, L=2, families=("toy",), n_samples=3000)
    assert isinstance(failed.value, CertificationFailed) and not failed.value.report.ok
    report = assert_lossless(RULES["spectr_gbv"], "spectr_gbv", K=2, L=2, families=("toy",), n_samples=3000)
    assert report.ok and report.results[0].n == 3000 and report.results[0].alpha == DEFAULT_ALPHA
    direct = certify_verifier(RULES["spectr_gbv"], "spectr_gbv", K=2, L=2, families=("toy",), n_samples=3000)
    assert direct.table() == report.table()  # the helper is certify_verifier plus the assertion


def test_helpers_raise_value_errors():
    with pytest.raises(ValueError, match="unknown rule"):
        assert_lossless(RULES["sd"], "nope")
    with pytest.raises(ValueError, match="family must be one of"):
        assert_acceptance(RULES["sd"], "sd", families=("nope",))
    with pytest.raises(ValueError, match="no cases to certify"):
        assert_lossless(RULES["sd"], "sd", families=())


def test_light_imports():
    """Loading the plugin imports neither torch nor scipy nor numpy; the strategies need no pytest."""
    code = ("import sys, spectr_gbv.oracle.pytest_plugin; assert not {'torch', 'scipy', 'numpy'} & set(sys.modules), "
            "sorted({'torch', 'scipy', 'numpy'} & set(sys.modules))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    code = "import sys, spectr_gbv.oracle.strategies; assert 'pytest' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- the strategies ---------------------------------------------------------------------------

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _applicable_rules(K: int):
    return [n for n in registry.names() if K == 1 or not registry.is_single_draft(n)]


@SETTINGS
@given(verifier_inputs(), st.integers(0, 2**31))
def test_drawn_inputs_are_valid_for_every_reference_rule(inputs, seed):
    tokens, dp, tp = inputs
    K, L, V = dp.shape
    assert tokens.dtype == np.int64 and dp.dtype == np.float64 and tp.dtype == np.float64
    assert tokens.shape == (K, L) and tp.shape == (K, L + 1, V) and 2 <= V <= 6
    check_iteration_inputs(tokens, dp, tp)
    np.testing.assert_allclose(dp.sum(-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(tp.sum(-1), 1.0, atol=1e-12)
    for k in range(K):  # prefix-dependent models: drafts sharing a prefix share its rows
        for j in range(K):
            shared = next((i for i in range(L) if tokens[k, i] != tokens[j, i]), L)
            np.testing.assert_array_equal(dp[k, :shared], dp[j, :shared])
            np.testing.assert_array_equal(tp[k, :shared + 1], tp[j, :shared + 1])
    for name in _applicable_rules(K):
        verdict = RULES[name].verify(tokens, dp, tp, SamplingSource(seed))
        assert 0 <= verdict.tau <= L
        assert tuple(verdict.tokens[:verdict.tau]) in {tuple(tokens[k, :verdict.tau]) for k in range(K)}


@SETTINGS
@given(verifier_inputs(kind="zero_mass"))
def test_zero_mass_kind_has_a_drafted_token_of_target_probability_zero(inputs):
    tokens, dp, tp = inputs
    K, L, _ = dp.shape
    chosen_q = np.take_along_axis(tp[:, :L], tokens[:, :, None], axis=2)[:, :, 0]
    assert (chosen_q == 0).any()
    if K == 1:  # a single draft is never accepted past its first zero-mass token
        i = int(np.flatnonzero(chosen_q[0] == 0)[0])
        for name in ("sd", "bv"):
            assert RULES[name].verify(tokens, dp, tp, SamplingSource(0)).tau <= i


@SETTINGS
@given(verifier_inputs(kind="equal"))
def test_equal_kind_has_p_equal_q(inputs):
    tokens, dp, tp = inputs
    np.testing.assert_array_equal(dp, tp[:, :-1])
    if dp.shape[0] == 1:  # p = q: token verification accepts the whole block
        assert RULES["sd"].verify(tokens, dp, tp, SamplingSource(0)).tau == tokens.shape[1]


@SETTINGS
@given(verifier_inputs(kind="disjoint"))
def test_disjoint_kind_has_disjoint_supports(inputs):
    tokens, dp, tp = inputs
    assert not ((dp > 0) & (tp[:, :-1] > 0)).any()
    assert (np.take_along_axis(tp[:, :-1], tokens[:, :, None], axis=2) == 0).all()


@settings(max_examples=25, deadline=None)
@given(batched_inputs(kind=st.sampled_from(KINDS)), st.integers(0, 2**31))
def test_batched_inputs_feed_the_batched_contract(batch, seed):
    tokens, dp, tp = batch
    B, K, L, V = dp.shape
    assert tokens.shape == (B, K, L) and tp.shape == (B, K, L + 1, V) and 1 <= B <= 4
    for b in range(B):
        check_iteration_inputs(tokens[b], dp[b], tp[b])
    rule = RULES["sd" if K == 1 else "spectr"]
    verdict = rule(tokens, dp, tp, seeds=np.arange(B, dtype=np.int64) + seed)
    assert verdict.tau.shape == (B,) and ((verdict.tau >= 0) & (verdict.tau <= L)).all()


def test_strategy_arguments_are_checked():
    @settings(max_examples=1, deadline=None)
    @given(verifier_inputs(kind="nope"))
    def draw(_):
        pass

    with pytest.raises(ValueError, match="kind must be one of"):
        draw()
