"""The certification suite of the torch verifiers: cases, the verifiers certified (``suite_verifier``) and
the planted defects' cases.  Shared by ``spectr-gbv certify`` (certify/verifiers/run.py) and the
tests (tests/certify/verifiers/test_verifiers_certify.py, test_verifiers_certify_distinctive.py,
test_certify_cli.py).  Every per-rule number (seeds, shapes, planted defects) is a field of the
rule's spec (reference.rules.registry.RuleSpec).

Cases (oracle.certify FixedCase: fixed draft blocks, the backend's outcomes against the
reference rule's exact law given them):
  * ``toy_cases``: V = 3 (K = 3, L = 3) in float32 and V = 4 (K = 2, L = 2) in bfloat16
    (K = 1 for single-draft rules), toy models of oracle.certify_cases;
  * ``large_case``: random peaked rows at V = 4,096 (oracle.certify_cases.large_models(4096, 21)),
    K = 2 (K = 1 single-draft), L = the spec's ``rows_L`` (2; SpecTr 1: beyond depth 1 its ρ*
    is solved per row, slow at V = 4,096: benchmarks/CERTIFY.md);
  * ``oracle.certify_cases.coverage_case``: per rule its branch-coverage case
    (``RuleSpec.coverage_seeds``: V = 3-5, K = 1 single-draft / 2-3, L = 3, float32), on which
    every outcome class its code distinguishes (oracle.branches) has exact probability
    ≥ ``oracle.certify_cases.COVERAGE_FLOOR`` = 0.02 (tests/oracle/test_case_coverage.py); the
    public certifier (oracle.harness.certify_verifier) runs it too, as its "coverage" family;
  * ``distinctive_case``: the cases of the rules with ``distinctive_seeds`` (toy V = 3 and rows
    V = 4,096 at the spec's seeds), checked to be at TV ≥ 0.05 from the other multi-draft rules.
bfloat16 cases use rows exact in bfloat16 that sum to exactly 1 (``bf16_exact``), and every case
is drawn with a seed where no value of τ has probability above 0.99 (``nondegenerate_case``):
tests/certify/verifiers/test_verifiers_certify.py (module doc) says why.

Planted defects (``registry.planted()``, ``RuleSpec.planted``; classes in
certify/planted.py): the real torch verifier with one deliberate change, certified
against the correct rule's exact law on ``planted_case``; the certification must catch each.
The law-level negative controls (``oracle.certify_cases.released_rule_against_target``): the
lossy rules against the target's first-token law at K = L = 2 (docs/rules.md §2.5).
"""

from __future__ import annotations

import numpy as np
import torch

from spectr_gbv.oracle.certify import FixedCase, exact_verdict_law
from spectr_gbv.oracle.certify_cases import fixed_case, large_models, toy_models
from spectr_gbv.reference.rules import get_rule, registry

from spectr_gbv.gpu_backend import verifiers as _verifiers
from spectr_gbv.reference.exact import total_variation

LARGE_V = 4096


# -- verifiers ---------------------------------------------------------------------------------

def suite_verifier(rule: str, dtype: torch.dtype, device: str | torch.device = "cpu"):
    """The torch verifier certified under ``rule``: a planted defect (``registry.planted()``) or the
    registered one (``gpu_backend.verifiers.get_verifier``, read at call time so a patched
    registry is used), taking certification's numpy rows in ``dtype`` on ``device``.

    Raises:
        ValueError: unknown rule name.
    """
    planted = registry.planted()
    if rule in planted:
        from spectr_gbv.certify.planted import planted_verifier

        return planted_verifier(rule).on(device, dtype)
    made = _verifiers.get_verifier(rule)
    return made.on(device, dtype)


# -- cases -------------------------------------------------------------------------------------

def bf16_exact(rows: np.ndarray) -> np.ndarray:
    """Rows of multiples of 2^-s with at most 8 significant bits (s = 8 for V ≤ 16, else 16),
    summing to exactly 1: exact in bfloat16, float32 and float64, so the backend sees (and,
    renormalising by a float32 sum of exactly 1, keeps) the very rows whose exact law is the
    reference.  Positive entries stay positive."""
    V = rows.shape[-1]
    scale = 2 ** (8 if V <= 16 else 16)
    out = np.empty_like(rows)
    for idx in np.ndindex(rows.shape[:-1]):
        r = rows[idx] * scale
        k = np.where(r > 0, np.maximum(np.round(r), 1.0), 0.0)
        big = k >= 256
        step = 2.0 ** (np.floor(np.log2(np.where(big, k, 1.0))) - 7)  # keep 8 significant bits
        k = np.where(big, np.round(k / step) * step, k)
        deficit = int(scale - k.sum())
        small = np.flatnonzero((k >= 1) & (k < 255))  # ±1 keeps them exact and positive
        while deficit != 0:
            sign = 1 if deficit > 0 else -1
            pool = small if sign > 0 else small[k[small] >= 2]
            take = pool[: abs(deficit)]
            if take.size == 0:
                raise ValueError("bf16_exact: cannot fix the row sum")
            k[take] += sign
            deficit -= sign * take.size
        out[idx] = k / scale
    assert np.all(out.sum(-1) == 1.0) and np.all((out > 0) == (rows > 0))
    return out


def tau_law(law: dict, L: int) -> np.ndarray:
    """The law of τ (float64 [L+1]) from an exact verdict law."""
    out = np.zeros(L + 1)
    for (tau, _, _), pr in law.items():
        out[tau] += pr
    return out


def nondegenerate_case(name, rule, models, K, L, first_seed, backend_dtype="float32",
                       reference_rule=None, expect_pass=True):
    """The first seeded fixed case whose exact law of τ puts at most 0.99 on any one value (with
    τ almost surely L, oracle.certify's mean test breaks down: it compares with the exact
    variance, ~1e-31 there).  bfloat16 cases get bfloat16-exact rows (``bf16_exact``).

    Raises:
        RuntimeError: none of 50 seeds from ``first_seed`` gives such a case.
    """
    draft, target = models
    ref = reference_rule or rule
    for seed in range(first_seed, first_seed + 50):
        case = fixed_case(name, rule, draft, target, K, L, seed, reference_rule=ref,
                          expect_pass=expect_pass, backend_dtype=backend_dtype)
        if backend_dtype == "bfloat16":
            case = FixedCase(name, rule, ref, case.draft_tokens, bf16_exact(case.draft_probs),
                             bf16_exact(case.target_probs), expect_pass=expect_pass,
                             backend_dtype=backend_dtype)
        law = exact_verdict_law(get_rule(ref), case.draft_tokens, case.draft_probs, case.target_probs)
        if tau_law(law, L).max() <= 0.99:
            return case
    raise RuntimeError(f"no non-degenerate case for {name}")


def toy_cases(rule: str, single_draft: bool | None = None) -> list[FixedCase]:
    """V = 3 (K = 3, L = 3) in float32 and V = 4 (K = 2, L = 2) in bfloat16 (K = 1 if
    single-draft)."""
    single = registry.is_single_draft(rule) if single_draft is None else single_draft
    return [nondegenerate_case(f"{rule} toy V={V} K={K} L={L} {dt}", rule, toy_models(V, seed), K, L, seed,
                               backend_dtype=dt)
            for V, K, L, seed, dt in ((3, 1 if single else 3, 3, 12, "float32"),
                                      (4, 1 if single else 2, 2, 13, "bfloat16"))]


def large_case(rule: str, dtype: str, single_draft: bool | None = None) -> FixedCase:
    """Random rows at V = 4,096, K = 2 (1 single-draft), L = the spec's ``rows_L`` (2; SpecTr: 1),
    ``dtype``."""
    single = registry.is_single_draft(rule) if single_draft is None else single_draft
    K = 1 if single else 2
    L = registry.spec(rule).rows_L
    return nondegenerate_case(f"{rule} rows V={LARGE_V} K={K} L={L} {dtype}", rule,
                              large_models(LARGE_V, 21), K, L, 22, backend_dtype=dtype)


# The non-modifying rules' cases (tests/certify/verifiers/test_verifiers_certify_distinctive.py): per rule the
# spec's ``distinctive_seeds`` (toy, rows), chosen by scanning so that the rule's law is at
# TV ≥ 0.05 from each of DISTINCT_FROM.
DISTINCT_FROM = ("kseq_bv", "traversal", "spectr")


def distinctive_rules() -> tuple[str, ...]:
    """The registered rules certified on distinctive cases (``distinctive_seeds`` set)."""
    return tuple(s.name for s in registry.specs() if s.distinctive_seeds is not None)


def toy_seed(rule: str) -> int:
    """Draft seed of a rule's distinctive V = 3 case."""
    return registry.spec(rule).distinctive_seeds[0]


def rows_seed(rule: str) -> int:
    """Draft seed of a rule's distinctive V = 4,096 case."""
    return registry.spec(rule).distinctive_seeds[1]


def distinctive_case(name, rule, models, K, L, seed, others=(), check: bool = True) -> FixedCase:
    """The seeded float32 fixed case, checked (``check``) to be worth certifying: no value of τ
    has probability above 0.99, and the rule's exact law is at TV ≥ 0.05 from each rule in
    ``others`` (a port of the wrong rule would be caught; on many seeds these rules coincide,
    e.g. when one draft is accepted whole almost surely).

    Raises:
        AssertionError: ``check`` and the case fails either condition.
    """
    draft, target = models
    case = fixed_case(name, rule, draft, target, K, L, seed, backend_dtype="float32")
    if check:
        laws = {r: exact_verdict_law(get_rule(r), case.draft_tokens, case.draft_probs, case.target_probs)
                for r in (rule,) + tuple(others)}
        tl = tau_law(laws[rule], L)
        assert tl.max() <= 0.99, tl
        for other in others:
            assert total_variation(laws[rule], laws[other]) >= 0.05, (rule, other)
    return case


def distinctive_cases(rule: str, check: bool = False) -> list[FixedCase]:
    """The toy (V = 3, K = L = 3) and rows (V = 4,096, K = L = 2) cases of a non-modifying rule
    (empty for the other rules)."""
    if registry.spec(rule).distinctive_seeds is None:
        return []
    others = tuple(r for r in DISTINCT_FROM if r != rule)
    return [distinctive_case(f"{rule} toy V=3 K=3 L=3 float32 (distinctive)", rule, toy_models(3, 12),
                             3, 3, toy_seed(rule), others, check),
            distinctive_case(f"{rule} rows V={LARGE_V} K=2 L=2 float32 (distinctive)", rule,
                             large_models(LARGE_V, 21), 2, 2, rows_seed(rule), others, check)]


# -- planted defects -----------------------------------------------------------------------------

def planted_case(planted: registry.Planted, backend_dtype: str = "float32") -> FixedCase:
    """A planted defect's case: toy_models(V, models_seed), K drafts of L tokens from the first
    non-degenerate seed at draft_seed, certified against its base rule's exact law, expected
    to fail."""
    p = planted
    return nondegenerate_case(f"{p.name} vs {p.base} toy V={p.V} K={p.K} L={p.L} {backend_dtype}",
                              p.name, toy_models(p.V, p.models_seed), p.K, p.L, p.draft_seed,
                              backend_dtype=backend_dtype, reference_rule=p.base, expect_pass=False)


def __getattr__(name: str):
    if name == "PLANTED":  # live: every registered rule's planted defects, by name
        return registry.planted()
    if name == "TOY_SEED":  # live: {rule: toy seed} of the rules with distinctive cases
        return {r: toy_seed(r) for r in distinctive_rules()}
    raise AttributeError(name)
