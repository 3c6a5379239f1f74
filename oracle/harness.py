"""The public certification API: certify anyone's verifier against a rule's exact law.

    from spectr_gbv.oracle.harness import certify_verifier
    report = certify_verifier(my_verifier, "sd", K=1, L=3)
    assert report.ok, report.table()

``my_verifier`` is any object with the batched contract of reference/contract.py (numpy or
torch; it gets numpy arrays and per-row seeds).  It is run on the built-in case families of
``oracle.certify_cases.case_family`` (toy, prefix-dependent, V = 4,096 rows, zero target mass
on drafted tokens, near-disjoint rows, p = q) and on the caller's own ``FixedCase`` rows, and
each case's outcomes are tested against the reference rule's exact law given the drafts
(oracle/certify.py: per case N, α, the detectable δ, four p-values, mean τ with its interval
against the exact E[τ], the worst outcome cells).

A verifier that no registered rule describes is certified lossless without a reference law by
``certify_lossless`` (oracle/lossless.py; re-exported here):

    from spectr_gbv.oracle.harness import certify_lossless
    report = certify_lossless(my_verifier, K=1, L=3)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

from spectr_gbv.reference.contract import to_numpy
from spectr_gbv.reference.rules import registry

from spectr_gbv.oracle.certify import CertificationReport, FixedCase, certify
from spectr_gbv.oracle.certify_cases import FAMILIES, case_family


def __getattr__(name: str):
    """``certify_lossless`` and its report classes, from oracle/lossless.py, imported on first
    use: that module takes its default N from oracle/pytest_plugin.py, which imports pytest,
    and importing this module must not need pytest."""
    if name in ("certify_lossless", "LosslessReport", "LosslessCaseResult", "ModelPair"):
        from spectr_gbv.oracle import lossless

        return getattr(lossless, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def certify_verifier(verifier, rule: str, *, K: int | None = None, L: int = 3,
                     families: Sequence[str] = FAMILIES, cases: Sequence[FixedCase] = (),
                     n_samples: int = 50_000, alpha: float = 1e-6, dtype: str = "float64",
                     seed: int = 0, chunk: int = 4096, progress=None) -> CertificationReport:
    """Certify ``verifier`` against the exact law of the registered rule ``rule``.

    Args:
        verifier: an object with the batched contract (reference/contract.py): called as
            ``verifier(draft_tokens [B,K,L] int64, draft_probs [B,K,L,V],
            target_probs [B,K,L+1,V], seeds=int64 [B])`` with numpy arrays, returning an object
            with ``tau`` [B] and ``tokens`` [B, L+1] (numpy or tensors).
        rule: the registered rule whose law the verifier claims (``reference.rules.registry``:
            e.g. "sd" for token-level speculative sampling, "bv", "spectr").
        K: drafts (default: 1 for a single-draft rule, else 2).  L: block length ≥ 1.
        families: built-in families to run (``oracle.certify_cases.FAMILIES``; () for none).
        cases: the caller's own FixedCase rows (``FixedCase(name, rule, rule, draft_tokens
            [K, L], draft_probs [K, L, V], target_probs [K, L+1, V], backend_dtype=...)``).
        n_samples: N per case (≥ 2).  alpha: false-alarm rate per case in (0, 1).
        dtype: rows handed over as "float64", "float32" or bfloat16-rounded "bfloat16".
        seed: base seed of the cases and the verifier's per-row seeds.  chunk: rows per call.
        progress: called with each CaseResult.
    Returns:
        CertificationReport: ``ok``, ``table()``, ``to_json()``, and per case a CaseResult.
    Raises:
        ValueError: unknown rule or family, bad K, L, n_samples, chunk or dtype; malformed
            verifier output (τ outside [0, L], token ids outside [0, V)).
    """
    K = registry.default_K(rule, 2) if K is None else K
    built = [case_family(f, rule, K, L, dtype, seed) for f in families]
    for case in cases:
        if not isinstance(case, FixedCase):
            raise ValueError(f"cases must hold FixedCase objects, got {type(case).__name__}")
    return certify(verifier, [*built, *cases], n_samples, alpha, chunk, seed, progress)


@dataclass
class Probe:
    """One deterministic boundary probe: ``passed`` and what was seen (``detail``)."""

    name: str
    passed: bool
    detail: str


# (family, uniform): u → 0 makes every coin with h > 0 succeed and must still refuse a token of
# target probability 0 (h = 0); u = 1 makes every coin with h < 1 fail, so p = q rows (h = 1)
# must still be accepted in full, and a forced rejection must find a residual with mass
PROBES = (("zeros", 2.0**-53), ("zeros", 1.0), ("equal", 1.0), ("equal", 2.0**-53),
          ("toy", 2.0**-53), ("toy", 1.0))


def boundary_probes(verifier, rule: str, *, K: int | None = None, L: int = 3) -> list[Probe]:
    """Deterministic probes of a verifier that lets the caller inject its uniforms.

    The verifier must take ``noise=(uniforms float64 [B, K, L+1] in (0, 1], exponentials
    float64 [B, V] > 0)`` with the conventions of ``reference.randomness.MatchedSource`` (coin
    (k, i) succeeds iff u[k, i] ≤ h; the draw is the exponential race), as this project's
    verifiers do.  With every uniform at 2^-53 and at 1 on the families of ``PROBES``, its
    verdict (τ and tokens) must equal the reference rule's under the same noise, and a drafted
    token of target probability 0 must never be accepted.  A row holding NaN must raise
    ValueError.

    Args:
        verifier: the batched verifier.  rule: registered rule whose law it claims.
        K: drafts (default 1 for a single-draft rule, else 2).  L: block length.
    Returns:
        list of Probe, one per (family, uniform) and one for NaN rows.
    Raises:
        TypeError: the verifier does not take ``noise=`` (no uniforms can be injected).
        ValueError: unknown rule.
    """
    import numpy as np

    from spectr_gbv.reference.rules import get_rule

    if "noise" not in inspect.signature(verifier.__call__ if not inspect.isfunction(verifier) else verifier).parameters:
        raise TypeError(f"{type(verifier).__name__} does not take noise=: its uniforms cannot be injected")
    K = registry.default_K(rule, 2) if K is None else K
    reference = get_rule(rule)
    probes = []
    for family, u in PROBES:
        case = case_family(family, rule, K, L)
        rows = (case.draft_tokens[None], case.draft_probs[None], case.target_probs[None])
        noise = (np.full((1, K, L + 1), u), np.random.default_rng(7).exponential(size=(1, case.V)) + 1e-3)
        want = reference(*rows, noise=noise)
        got = verifier(*rows, noise=noise)
        tau, tokens = int(to_numpy(got.tau)[0]), to_numpy(got.tokens)[0]
        ok = tau == int(want.tau[0]) and np.array_equal(tokens, want.tokens[0])
        q_zero = [int(tokens[i]) for i in range(min(tau, L)) if family == "zeros" and i == 0]
        ok = ok and not q_zero
        probes.append(Probe(f"{family} rows, every uniform = {u:g}", ok,
                            f"τ = {tau}, tokens {tokens.tolist()}; reference τ = {int(want.tau[0])}, "
                            f"tokens {want.tokens[0].tolist()}"))
    case = case_family("toy", rule, K, L)
    bad = case.target_probs.copy()
    bad[0, 0, 0] = np.nan
    try:
        out = verifier(case.draft_tokens[None], case.draft_probs[None], bad[None], seeds=np.array([0]))
        probes.append(Probe("NaN in target_probs", False, f"returned τ = {to_numpy(out.tau).tolist()} "
                            "instead of raising ValueError"))
    except ValueError as err:
        probes.append(Probe("NaN in target_probs", True, f"ValueError: {err}"))
    return probes
