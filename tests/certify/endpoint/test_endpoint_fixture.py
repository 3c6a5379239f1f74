"""The deployment fixture ``spectr_endpoint`` (certify/endpoint/pytest_plugin.py, entry point
``spectr_gbv_endpoint``): a user's test file run by pytester (in process, the plugin loaded from
its pytest11 entry point) certifies the loopback fake deployment (tests/helpers/fake_deployment.py):
it passes the correct chain and fails a sampler at 0.9 T, naming the temperature test; the CI
how-to's pytest file passes; the options set the plan's defaults.  Every certification is
seeded, so the outcomes are deterministic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# the endpoint certifier is imported here, before pytester's in-process runs: they drop the
# modules they import
import spectr_gbv.certify.endpoint.endpoint  # noqa: F401
from helpers.fake_deployment import serve

ROOT = Path(__file__).parents[3]
pytest_plugins = ["pytester"]


def test_the_plugin_loads_nothing_heavy():
    """Loading the plugin imports neither numpy, scipy nor torch (the endpoint certifier is
    imported by the fixture's first call)."""
    code = ("import sys, spectr_gbv.certify.endpoint.pytest_plugin; heavy = {'torch', 'scipy', 'numpy'} & "
            "set(sys.modules); assert not heavy, sorted(heavy)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


ENDPOINT_TESTS = """
import pytest

def test_correct_server(spectr_endpoint):
    cert = spectr_endpoint({good!r})
    assert cert.verdict == "PASS" and cert.samples == 80 and cert.plan.n_new == 16  # the CLI's defaults
    assert spectr_endpoint.runs[-1][0].endswith("spectr-endpoint-0.jsonl")

def test_hot_server(spectr_endpoint):
    spectr_endpoint({hot!r}, samples={n}, concurrency=16)

def test_nobody_there(spectr_endpoint):
    spectr_endpoint("http://127.0.0.1:9", retries=0, timeout_s=5)

def test_keywords_are_checked(spectr_endpoint):
    with pytest.raises(TypeError, match="unknown keyword"):
        spectr_endpoint({good!r}, n_sample=3)
    with pytest.raises(TypeError, match="not both"):
        spectr_endpoint({good!r}, samples=3, n_samples=3)
"""

# the sampler at 0.9 T planted in the fake chain (V = 64, row entropies 1-2.5 nats): N = 160 samples
ENDPOINT_DEFECT_N = 160


def test_spectr_endpoint_passes_a_correct_server_and_fails_a_hot_one(pytester, monkeypatch):
    """The fixture against tests/helpers/fake_deployment.py: the correct chain passes at the CLI's
    default plan (80 samples × 16 tokens, top-20 reference ``self``, α = 1e-3 for the family), a
    server sampling at 0.9 T fails at N = 160 with a message naming the temperature test, an
    unreachable URL fails in one line, and unknown keywords raise TypeError.

    The counts below were measured with the former temperature test (a normal score, z); the test
    is now an e-value exact at every N (oracle.sequence_scores), and this seeded run's hot server
    fails it at N = 160 with log W 14.2 (p 6.7e-7 against its 2.5e-4); the counts were not re-run.
    Measured through ``certify_endpoint`` against this server, the plan's seed 0, 1, … varied (its
    engine seeds and PIT uniforms), 16 tokens, top-20 ``self`` reference, α = 1e-3: the 0.9 T
    server failed in 27 of 30 runs at N = 80 (temperature z 3.5-6.6, median 4.9, against the 3.66
    its two-sided 2.5e-4 needs), 30 of 30 at N = 120 (smallest z 4.7), 30 of 30 at N = 160
    (smallest z 5.7, median 7.0; detectable |Δβ| 0.092 against the defect's 0.11) and 30 of 30 at
    240 (smallest z 6.6).  The correct chain passed in 100 of 100 runs at N = 80 and 40 of 40 at
    N = 160 (largest temperature |z| 2.7): no false alarm seen (95 % upper bounds 0.03 and 0.072 on
    the rate; the family's α is 1e-3).  The runs here use
    seed 0 (the fake server's sampling is seeded too), so their outcome is fixed; at N = 160 even
    the smallest of 30 runs' z is 2 above the threshold, should a change move the draws.
    """
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    with serve() as (good, _), serve("temperature-0.9") as (hot, _):
        pytester.makepyfile(test_deployment=ENDPOINT_TESTS.format(good=good, hot=hot, n=ENDPOINT_DEFECT_N))
        result = pytester.runpytest("-p", "no:cacheprovider", "-rfP")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "FAILED test_deployment.py::test_hot_server" in out
    result.stdout.re_match_lines([
        rf"E +Failed: deployment {hot} \(fake-chain, reference self\): verdict FAIL",
        r"E +temperature test failed: log W [0-9.]+, p [0-9.e-]+ < alpha 0\.00025 \(observed .* vs expected .*\)",
        r"E +report:",
        r"E +verdict: FAIL",
        rf"E +plan: N = {ENDPOINT_DEFECT_N} samples × 16 tokens, T = 1, alpha = 0\.001 \(family\).*",
        r"E +run file: .*spectr-endpoint-0\.jsonl \(certificate: .*spectr-endpoint-0\.json\)",
    ])
    # the unreachable server: one line, as the CLI's exit 2
    result.stdout.re_match_lines([r"E +Failed: spectr_endpoint\('http://127\.0\.0\.1:9'\): cannot certify: URL: .*"])
    assert "FAILED test_deployment.py::test_nobody_there" in out
    # a PASS prints its report (-rP shows it)
    assert "verdict: PASS" in out and "Traceback" not in out


def test_ci_howto_test_file_passes(pytester, monkeypatch):
    """docs/howto/certify_a_deployment_in_ci.md's pytest file, run against the correct fake chain
    (its URL through ENGINE_URL, as the how-to reads it)."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    howto = (ROOT / "docs" / "howto" / "certify_a_deployment_in_ci.md").read_text()
    block = howto.split("## 3. Or from pytest")[1].split("```python")[1].split("```")[0]
    assert "spectr_endpoint(" in block and len(block.strip().splitlines()) <= 8
    with serve() as (url, _):
        monkeypatch.setenv("ENGINE_URL", url)
        pytester.makepyfile(test_speculation_keeps_the_law=block)
        result = pytester.runpytest("-p", "no:cacheprovider", "--spectr-endpoint-samples", "16")
    result.assert_outcomes(passed=1)


def test_spectr_endpoint_options(pytester, monkeypatch):
    """--spectr-endpoint-samples/-tokens/-alpha set the plan's defaults, a call's value wins, bad
    values are usage errors, and --help lists them."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    with serve() as (url, _):
        pytester.makepyfile(test_options=f"""
def test_defaults(spectr_endpoint):
    assert (spectr_endpoint.samples, spectr_endpoint.max_new_tokens, spectr_endpoint.alpha) == (12, 4, 0.01)
    cert = spectr_endpoint({url!r})
    assert (cert.plan.n_samples, cert.plan.n_new, cert.plan.alpha, cert.samples) == (12, 4, 0.01, 12)
    cert = spectr_endpoint({url!r}, samples=10, max_new_tokens=3, alpha=0.02, seed=5)
    assert (cert.plan.n_samples, cert.plan.n_new, cert.plan.alpha, cert.plan.seed) == (10, 3, 0.02, 5)
    assert len(spectr_endpoint.runs) == 2
""")
        result = pytester.runpytest("-p", "no:cacheprovider", "--spectr-endpoint-samples", "12",
                                    "--spectr-endpoint-tokens", "4", "--spectr-endpoint-alpha", "0.01")
    result.assert_outcomes(passed=1)
    assert "spectr-gbv deployment certification (spectr_endpoint): N = 12, tokens 4, α = 0.01" in result.stdout.str()
    bad = pytester.runpytest("--spectr-endpoint-samples", "0", "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--spectr-endpoint-samples must be >= 1, got 0*"])
    bad = pytester.runpytest("--spectr-endpoint-alpha", "1", "-p", "no:cacheprovider")
    bad.stderr.fnmatch_lines(["*--spectr-endpoint-alpha must be in (0, 1), got 1.0*"])
    helped = pytester.runpytest("--help")
    helped.stdout.fnmatch_lines(["*--spectr-endpoint-samples=N*", "*--spectr-endpoint-tokens=n*",
                                 "*--spectr-endpoint-alpha=A*"])
