"""The public certification API: certify anyone's verifier against a rule's exact law.

    from oracle.harness import certify_verifier
    report = certify_verifier(my_verifier, "sd", K=1, L=3)
    assert report.ok, report.table()

``my_verifier`` is any object with the batched contract of reference/contract.py (numpy or
torch; it gets numpy arrays and per-row seeds).  It is run on the built-in case families of
``oracle.certify_cases.case_family`` (toy, prefix-dependent, V = 4,096 rows, zero target mass
on drafted tokens, near-disjoint rows, p = q) and on the caller's own ``FixedCase`` rows, and
each case's outcomes are tested against the reference rule's exact law given the drafts
(oracle/certify.py: per case N, α, the detectable δ, four p-values, mean τ with its interval
against the exact E[τ], the worst outcome cells).
"""

from __future__ import annotations

from typing import Sequence

from reference.rules import registry

from .certify import CertificationReport, FixedCase, certify
from .certify_cases import FAMILIES, case_family


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
