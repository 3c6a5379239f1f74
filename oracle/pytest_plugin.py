"""pytest plugin: certify your verifier from your own tests.

Installed with the package (entry point ``pytest11: spectr_gbv``), so in any test file:

    from spectr_gbv.oracle.pytest_plugin import assert_lossless, assert_acceptance

    def test_my_sd_is_lossless():
        assert_lossless(my_sd, "sd", L=3)            # AssertionError with the report if not

    def test_my_sd_accepts_like_sd(spectr_certify):  # the fixture: same helpers, CLI defaults
        spectr_certify.assert_acceptance(my_sd, expected="sd")

    def test_my_sd_keeps_the_contract(spectr_contract):  # hypothesis-driven contract properties
        spectr_contract(my_sd, "sd")                 # a failure prints a ready-to-paste batch

Options: ``--spectr-samples N`` (N per case, default 20,000) and ``--spectr-alpha A``
(false-alarm rate per case, default 1e-6) change the defaults of both helpers for the run;
the defaults are ``oracle.defaults.DEFAULT_SAMPLES`` / ``DEFAULT_ALPHA``, the same as
``oracle.harness.certify_verifier``'s.  ``--spectr-examples M`` (default 50) sets the batches
the contract suite (``assert_contract``, ``oracle.contract_suite``) tries.
Hypothesis strategies for verifier inputs are in ``oracle.strategies``.

A deployment (a server you started) is certified by the ``spectr_endpoint`` fixture of the
package's second plugin, ``certify.endpoint.pytest_plugin`` (entry point ``spectr_gbv_endpoint``).

The helpers wrap ``oracle.harness.certify_verifier`` (imported when first called: loading this
plugin imports pytest, the standard library and ``oracle.defaults`` only, never torch or scipy).
"""

from __future__ import annotations

import math
from typing import Sequence

import pytest

from spectr_gbv.oracle.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES  # the one source (stdlib only)

# The defaults the helpers use when n_samples/alpha are not given: the constants imported above, or the
# command-line options of the running pytest session (set in pytest_configure).
CONTRACT_EXAMPLES = 50  # batches ``assert_contract`` tries by default (oracle.contract_suite)
# the endpoint fixture's plan defaults: None is certify.endpoint.run.Plan's own default
_defaults = {"n_samples": DEFAULT_SAMPLES, "alpha": DEFAULT_ALPHA, "examples": CONTRACT_EXAMPLES}
_saved: list[dict] = []

ALL_FAMILIES = None  # sentinel: every built-in family (oracle.certify_cases.FAMILIES)


class CertificationFailed(AssertionError):
    """The AssertionError of ``assert_lossless`` and ``assert_acceptance``; ``report`` is the
    oracle.certify.CertificationReport behind it (its rows, worst cells, p-values)."""

    def __init__(self, message: str, report):
        super().__init__(message)
        self.report = report


def _certify(verifier, rule, K, L, families, cases, n_samples, alpha, dtype, seed, chunk, input_checks=True):
    from spectr_gbv.oracle.harness import certify_verifier

    if families is not None and len(families) == 0 and len(cases) == 0:
        raise ValueError("no cases to certify: give families or cases (an empty run would pass vacuously)")
    return certify_verifier(
        verifier, rule, K=K, L=L, families=None if families is None else tuple(families),
        cases=cases, n_samples=_defaults["n_samples"] if n_samples is None else n_samples,
        alpha=_defaults["alpha"] if alpha is None else alpha, dtype=dtype, seed=seed, chunk=chunk,
        input_checks=input_checks)


def _case_detail(r) -> str:
    """The lines of one failing case: p-values, δ, empirical TV, mean τ, worst cells, and its
    failed deterministic checks (``CaseResult.checks``: the verifier's output, the Algorithm 2
    record)."""
    checks = [f"  {name}: {detail}" for name, detail in r.failed_checks]
    if not r.tests_passed:  # sampling stopped: the verifier raised or broke the contract
        return "\n".join([f"case {r.name!r}: {r.verdict} (its tests did not run)"] + checks)
    large = r.n_tests == 6  # the coarsened and identity tests added (oracle.certify module doc)
    lines = [
        f"case {r.name!r}: {r.verdict} (N = {r.n}, α = {r.alpha:g}; each of the "
        f"{'six tests at α/6' if large else 'four tests at α/4'})",
        f"  p-values: joint {r.pvalue_joint:.3g}, law of τ {r.pvalue_tau:.3g}, "
        f"emitted token given (τ, prefix) {r.pvalue_conditional:.3g}, mean τ {r.pvalue_mean:.3g}"
        + (f", coarsened ({r.coarse_bins} bins) {r.pvalue_coarse:.3g}, identity {r.pvalue_identity:.3g}"
           if large else ""),
        f"  detectable TV δ = {r.detectable_tv:.4f} (power 0.99); empirical TV = {r.empirical_tv:.4f}"
        + (f"; coarsened law δ = {r.detectable_tv_coarse:.4f}; identity test δ = "
           f"{r.detectable_tv_identity:.4f} on the whole law" if large else ""),
    ]
    if not math.isnan(r.exact_mean_tau):
        lines.append(f"  mean τ = {r.mean_tau:.4f}, CI [{r.mean_ci[0]:.4f}, {r.mean_ci[1]:.4f}], "
                     f"exact E[τ] = {r.exact_mean_tau:.4f}")
    if r.zero_cell_violations:
        lines.append(f"  outcomes of probability 0 observed: {r.zero_cell_violations}")
    if r.worst_cells:
        lines.append("  worst cells (τ, accepted prefix, emitted token): observed vs expected count")
        lines.extend(f"    {o!r}: {obs} vs {exp:.1f}" for o, obs, exp in r.worst_cells)
    return "\n".join(lines + checks)


def _family_of(case_name: str, rule: str) -> str:
    """The family (or the caller's case name) of a case named "<rule> <family> …"."""
    rest = case_name[len(rule) + 1:] if case_name.startswith(rule + " ") else case_name
    return rest.split()[0] if rest else case_name


def _claim(rule: str) -> tuple[str, str]:
    """(what failed, what passes) for ``rule``: losslessness for a rule the registry marks
    lossless, conformance to the rule's law otherwise."""
    from spectr_gbv.reference.rules import registry

    if registry.spec(rule).lossless:
        return (f"verifier is not lossless: it does not follow the exact law of the lossless rule {rule!r}",
                f"lossless (the exact law of {rule!r})")
    return (f"verifier does not conform to the exact law of rule {rule!r} (a lossy rule: this checks "
            f"conformance to its law, not losslessness)", f"conforms to the law of {rule!r}")


def assert_lossless(verifier, rule: str, *, K: int | None = None, L: int = 3,
                    families: Sequence[str] | None = ALL_FAMILIES, cases: Sequence = (),
                    n_samples: int | None = None, alpha: float | None = None, dtype: str = "float64",
                    seed: int = 0, chunk: int = 4096, input_checks: bool = True):
    """Assert that ``verifier`` follows the exact law of the registered rule ``rule``, keeps the
    seed contract, refuses impossible inputs and, for a rule that modifies later targets,
    returns the reference's Algorithm 2 record (``oracle.harness.certify_verifier``).

    For a lossless rule (``reference.rules.registry``: "sd", "bv", "spectr", …) passing means
    the verifier is lossless as that rule is; for a lossy one ("spectr_gbv", …) it means the
    verifier conforms to that rule's law.

    Args:
        verifier: an object with the batched contract (reference/contract.py): called with
            draft_tokens int64 [B, K, L], draft_probs [B, K, L, V], target_probs [B, K, L+1, V]
            (numpy) and ``seeds=`` int64 [B]; returns ``tau`` [B] and ``tokens`` [B, L+1].
        rule: the registered rule whose exact law the verifier claims.
        K: drafts (default 1 for a single-draft rule, else 2).  L: block length ≥ 1.
        families: built-in case families (default: every family of
            ``oracle.certify_cases.FAMILIES`` that has a case for this rule and K, as
            ``oracle.harness.certify_verifier``'s default: the others are skipped with a note
            in the report).
        cases: extra ``oracle.certify.FixedCase`` rows.
        n_samples: N per case (default 20,000 or ``--spectr-samples``).
        alpha: false-alarm rate per case (default 1e-6 or ``--spectr-alpha``).
        dtype: "float64", "float32" or "bfloat16" rows.  seed: base seed.  chunk: rows per call.
        input_checks: run the input probes (``oracle.input_probes``; default True).
    Returns:
        oracle.harness.HarnessReport (``ok`` is True; ``not_seen`` lists what it did not see).
    Raises:
        CertificationFailed (an AssertionError): some case, seed check or input probe fails;
            the message has the report table and, per failing case, its p-values, detectable δ,
            empirical TV, mean τ against exact E[τ], worst outcome cells and failed checks (the
            verifier's output, the Algorithm 2 record); ``.report`` is the report.
        ValueError: no cases (``families=()`` and no ``cases``); unknown rule or family, bad
            K/L/n_samples/alpha/dtype, malformed verifier output (from
            ``oracle.harness.certify_verifier``).
    """
    __tracebackhide__ = True
    failed_claim, _ = _claim(rule)
    report = _certify(verifier, rule, K, L, families, cases, n_samples, alpha, dtype, seed, chunk, input_checks)
    if not report.ok:
        bad = [r for r in report.results if not r.ok]
        seeds = [c for c in getattr(report, "seed_checks", ()) if not c.passed]  # oracle/seed_contract.py
        probes = [p for p in getattr(report, "probes", ()) if not p.passed]  # oracle/input_probes.py
        head = ([f"{failed_claim}: {len(bad)} of {len(report.results)} cases fail "
                 f"({', '.join(_family_of(r.name, rule) for r in bad)})"] if bad else [])
        head += [f"verifier breaks the seed contract (reference/contract.py), {c.name}: {c.detail}" for c in seeds]
        head += [f"verifier does not refuse an impossible input (reference/contract.py), {p.name}: {p.detail}"
                 for p in probes]
        raise CertificationFailed("\n".join(head + [report.table(), ""] + [_case_detail(r) for r in bad]), report)
    return report


def assert_acceptance(verifier, expected: str = "bv", *, K: int | None = None, L: int = 3,
                      families: Sequence[str] | None = ALL_FAMILIES, cases: Sequence = (),
                      n_samples: int | None = None, alpha: float | None = None, dtype: str = "float64",
                      seed: int = 0, chunk: int = 4096):
    """Assert that ``verifier`` accepts as many draft tokens as the registered rule ``expected``:
    in every case, the exact E[τ] of ``expected`` given the drafts lies in the confidence
    interval of the verifier's mean τ (the two-sided mean test of the certification at α/4, α/6
    on cases of more than 64 outcomes; the law of the outcomes is not checked, so a verifier of
    another rule with the same acceptance passes).

    Args:
        verifier: an object with the batched contract (see ``assert_lossless``).
        expected: the registered rule whose exact E[τ] is expected (default "bv", the optimal
            single-draft acceptance).
        K, L, families, cases, n_samples, alpha, dtype, seed, chunk: as in ``assert_lossless``
            (K defaults to 1 for a single-draft ``expected`` rule, else 2).
    Returns:
        oracle.certify.CertificationReport against ``expected`` (its ``ok`` may be False).
    Raises:
        CertificationFailed (an AssertionError): a case whose mean τ differs; the message names
            the case, its mean τ, the interval and the exact E[τ]; ``.report`` is the report.
        ValueError: as in ``assert_lossless``.
    """
    __tracebackhide__ = True
    report = _certify(verifier, expected, K, L, families, cases, n_samples, alpha, dtype, seed, chunk)
    bad = [r for r in report.results
           if not math.isnan(r.exact_mean_tau) and not (r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1])]
    if bad:
        lines = [f"verifier's acceptance differs from {expected!r}'s exact E[τ] in {len(bad)} of "
                 f"{len(report.results)} cases:"]
        for r in bad:
            side = "fewer" if r.mean_tau < r.exact_mean_tau else "more"
            lines.append(
                f"case {r.name!r}: mean τ = {r.mean_tau:.4f}, CI [{r.mean_ci[0]:.4f}, {r.mean_ci[1]:.4f}] "
                f"(N = {r.n}, α = {r.alpha:g}), exact E[τ] of {expected!r} = {r.exact_mean_tau:.4f} "
                f"({side} tokens accepted; mean-test p-value {r.pvalue_mean:.3g})")
        raise CertificationFailed("\n".join(lines), report)
    return report


def assert_contract(verifier, rule: str | None = None, **kwargs):
    """``oracle.contract_suite.assert_contract``: the batched contract's properties fuzzed by
    hypothesis (shapes, τ ≤ L, emitted ids in the target's support, seed replay, batch
    independence, impossible inputs refused); raises ``ContractFailed`` (an AssertionError)
    whose message holds the shrunk minimal failing batch as code.  ``max_examples`` defaults to
    ``--spectr-examples`` (50)."""
    __tracebackhide__ = True
    from spectr_gbv.oracle.contract_suite import assert_contract as run

    kwargs.setdefault("max_examples", _defaults["examples"])
    return run(verifier, rule, **kwargs)


class SpectrCertify:
    """What the ``spectr_certify`` fixture returns: the helpers with this run's defaults.

    Attributes:
        n_samples: N per case (``--spectr-samples``, default 20,000).
        alpha: false-alarm rate per case (``--spectr-alpha``, default 1e-6).
    """

    def __init__(self, n_samples: int, alpha: float):
        self.n_samples, self.alpha = n_samples, alpha

    def _kw(self, kwargs):
        kwargs.setdefault("n_samples", self.n_samples)
        kwargs.setdefault("alpha", self.alpha)
        return kwargs

    def assert_lossless(self, verifier, rule: str, **kwargs):
        """``assert_lossless`` with this run's N and α unless given."""
        __tracebackhide__ = True
        return assert_lossless(verifier, rule, **self._kw(kwargs))

    def assert_acceptance(self, verifier, expected: str = "bv", **kwargs):
        """``assert_acceptance`` with this run's N and α unless given."""
        __tracebackhide__ = True
        return assert_acceptance(verifier, expected, **self._kw(kwargs))

    def certify(self, verifier, rule: str, **kwargs):
        """``oracle.harness.certify_verifier`` with this run's N and α (no assertion)."""
        from spectr_gbv.oracle.harness import certify_verifier

        return certify_verifier(verifier, rule, **self._kw(kwargs))

    def assert_contract(self, verifier, rule: str | None = None, **kwargs):
        """``assert_contract`` (the contract suite) with this run's ``--spectr-examples``."""
        __tracebackhide__ = True
        return assert_contract(verifier, rule, **kwargs)


@pytest.fixture
def spectr_certify(request) -> SpectrCertify:
    """The certification helpers (``assert_lossless``, ``assert_acceptance``, ``certify``)
    with N and α from ``--spectr-samples`` / ``--spectr-alpha``."""
    return SpectrCertify(_defaults["n_samples"], _defaults["alpha"])


@pytest.fixture
def spectr_contract(request):
    """``assert_contract`` (oracle.contract_suite) with ``--spectr-examples`` batches:
    ``spectr_contract(verifier, rule)`` fails the test with the shrunk failing batch as code."""
    return assert_contract


def pytest_addoption(parser):
    group = parser.getgroup("spectr-gbv", "spectr-gbv verifier certification")
    group.addoption("--spectr-samples", type=int, default=None, metavar="N",
                    help=f"samples per certification case (default {DEFAULT_SAMPLES})")
    group.addoption("--spectr-alpha", type=float, default=None, metavar="A",
                    help=f"false-alarm rate per certification case, in (0, 1) (default {DEFAULT_ALPHA:g})")
    group.addoption("--spectr-examples", type=int, default=None, metavar="M",
                    help=f"batches the contract suite (spectr_contract) tries (default {CONTRACT_EXAMPLES})")


def pytest_configure(config):
    n = config.getoption("spectr_samples", None)
    a = config.getoption("spectr_alpha", None)
    m = config.getoption("spectr_examples", None)
    if m is not None and m < 1:
        raise pytest.UsageError(f"--spectr-examples must be >= 1, got {m}")
    if n is not None and n < 2:
        raise pytest.UsageError(f"--spectr-samples must be >= 2, got {n}")
    if a is not None and not 0.0 < a < 1.0:
        raise pytest.UsageError(f"--spectr-alpha must be in (0, 1), got {a}")
    _saved.append(dict(_defaults))
    _defaults["n_samples"] = DEFAULT_SAMPLES if n is None else n
    _defaults["alpha"] = DEFAULT_ALPHA if a is None else a
    _defaults["examples"] = CONTRACT_EXAMPLES if m is None else m


def pytest_unconfigure(config):
    if _saved:  # a nested session (pytester) restores the outer one's defaults
        _defaults.update(_saved.pop())


def pytest_report_header(config):
    lines = []
    if config.getoption("spectr_samples", None) is not None or config.getoption("spectr_alpha", None) is not None:
        lines.append(f"spectr-gbv certification: N = {_defaults['n_samples']}, α = {_defaults['alpha']:g} per case")
    return lines or None
