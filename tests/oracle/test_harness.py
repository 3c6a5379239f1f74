"""The public certification API (oracle.harness.certify_verifier) on a user's verifier.

The API guide's example (docs/api.md; examples/certify_your_verifier.py: token-level
speculative sampling written from scratch) must be certified on every built-in family, and the same code with the
classic bug (residual q instead of (q − p)_+) must fail.  N = 20,000 per case at α = 1e-6:
a correct verifier fails a case with probability ≤ 1e-6, and the detectable δ (power 0.99) is
below 0.034 on the small-vocabulary families (0.0331 on "onehot", 0.0313 on "deep"; 0.14 at
V = 4,096).  "branches" is skipped for the single-draft "sd" (report.skipped says so).  The assertions go through the
pytest plugin's ``assert_lossless`` (oracle/pytest_plugin.py), as a user's tests would.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

from spectr_gbv.oracle.certify_cases import FAMILIES, VOCAB_SAMPLES, VOCAB_V, case_family
from spectr_gbv.oracle.pytest_plugin import CertificationFailed, assert_lossless
from spectr_gbv.reference.contract import BatchVerdict, BatchedVerifier
from spectr_gbv.reference.rules import RULES

EXAMPLE = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "certify_your_verifier.py"))
my_sd = EXAMPLE["my_sd"]
N = 20_000
ALPHA = 1e-6


def sd_with_plain_residual(draft_tokens, draft_probs, target_probs, *, seeds):
    """The classic bug: after a rejection, resample from q instead of (q − p)_+."""
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


def test_example_verifier_is_certified_on_every_family():
    assert isinstance(my_sd, BatchedVerifier)
    report = assert_lossless(my_sd, "sd", K=1, L=3, n_samples=N, alpha=ALPHA)
    assert [r.name.split()[1] for r in report.results] == [f for f in FAMILIES if f not in ("branches", "distinctive")]
    assert len(report.skipped) == 2 and any("single-draft" in note for note in report.skipped)
    for r in report.results:
        assert r.verdict == "PASS" and r.n == (VOCAB_SAMPLES if r.V == VOCAB_V else N) and r.alpha == ALPHA
        if r.V == VOCAB_V:  # the real vocabulary: resolved by the coarsened and identity tests
            assert r.detectable_tv_coarse < 0.08 and r.detectable_tv_identity < 0.31, r.name
        else:
            assert r.detectable_tv < (0.15 if r.V == 4096 else 0.034), r.name
        assert r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]
        assert len(r.worst_cells) >= 1
    assert len(report.probes) == 7 and all(p.passed for p in report.probes)  # it refuses impossible rows
    by_family = {r.name.split()[1]: r for r in report.results}
    zeros = by_family["zeros"]  # target zeros on the last depth's drafted token: τ ≤ L − 1 = 2
    assert zeros.zero_cell_violations == 0 and zeros.mean_tau <= 2.0 and zeros.exact_mean_tau > 0.5
    assert by_family["equal"].mean_tau == 3.0 and by_family["equal"].exact_mean_tau == pytest.approx(3.0, abs=1e-12)


def test_plain_residual_bug_is_caught():
    with pytest.raises(CertificationFailed, match="verifier is not lossless: .* 2 of 2 cases fail") as failed:
        assert_lossless(sd_with_plain_residual, "sd", K=1, L=3, families=("toy", "disjoint"),
                        n_samples=N, alpha=ALPHA)
    report = failed.value.report
    assert not report.ok
    assert "case 'sd disjoint V=8 K=1 L=3': FAIL" in str(failed.value)
    assert [r.verdict for r in report.results] == ["FAIL", "FAIL"]
    # The residual's mass lands where the law has none: after a rejection at position 0 (probability
    # 0.999) the bug emits tokens 1, 2, 5, 7 of zero residual with expected counts 3.1, 6.2, 3.1, 3.9
    # at N = 20,000 (16.4 in all).  The worst cell is one of them (expected count 0, observed), and at
    # least two of them are observed: a lossless SD does neither; the bug misses the second with
    # probability 4.7e-5 (Poisson).  (Was: the worst cell observed more than 5 times, which the bug
    # does with probability 0.1–0.6 depending on which of the four cells ranks first: it held with
    # the old seeds, not with the hashed ones of oracle/seeding.py.)
    worst = report.results[1].worst_cells[0]
    assert worst[2] == 0.0 and worst[1] >= 1
    assert report.results[1].zero_cell_violations >= 2


def test_reference_rules_are_verifiers_of_the_contract():
    """The numpy reference is itself a batched verifier: it certifies against its own law."""
    assert isinstance(RULES["spectr"], BatchedVerifier)
    report = assert_lossless(RULES["spectr"], "spectr", K=2, L=2, families=("toy", "zeros", "equal"),
                             n_samples=N, alpha=ALPHA)
    assert report.ok and len(report.results) == 3


@pytest.mark.parametrize("kwargs,message", [
    (dict(family="nope", rule="sd", K=1, L=2), "family must be one of"),
    (dict(family="toy", rule="nope", K=1, L=2), "unknown rule"),
    (dict(family="toy", rule="sd", K=2, L=2), "single-draft: K must be 1"),
    (dict(family="toy", rule="bv", K=1, L=0), "L must be an integer >= 1"),
])
def test_case_family_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        case_family(**kwargs)


def test_api_doc_example_is_the_example_file():
    """docs/api.md's code block runs the code of examples/certify_your_verifier.py, line for line."""
    root = Path(__file__).parents[2]
    readme = (root / "docs" / "api.md").read_text()
    block = next(b for b in readme.split("```python")[1:] if "def my_sd" in b).split("```")[0]
    example = (root / "examples" / "certify_your_verifier.py").read_text()
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("print")]
    assert len(lines) >= 15
    missing = [ln for ln in lines if ln not in example]
    assert not missing, missing


def test_one_default_for_n_samples():
    """oracle.defaults.DEFAULT_SAMPLES is the default N of certify_verifier, the plugin, certify,
    certify_case and the third-party certificate."""
    import inspect

    from spectr_gbv.gpu_backend.adapters.third_party import certify_all
    from spectr_gbv.oracle import pytest_plugin
    from spectr_gbv.oracle.certify import certify, certify_case
    from spectr_gbv.oracle.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES
    from spectr_gbv.oracle.harness import certify_verifier

    assert DEFAULT_SAMPLES == 20_000 and pytest_plugin.DEFAULT_SAMPLES is DEFAULT_SAMPLES
    for fn in (certify_verifier, certify, certify_case, certify_all):
        params = inspect.signature(fn).parameters
        assert params["n_samples"].default == DEFAULT_SAMPLES and params["alpha"].default == DEFAULT_ALPHA, fn
