"""The one registry of verification rules: every list of rules in the project derives from it.

Per rule: its name, how to build the numpy reference, its parameters, the facts the rest of the project
asks about — lossless (certified and proved as such), citation, a one-line summary, the
engine's and the benchmark's flags — and its certification data (planted defects, case seeds
and shapes, engine skip, test variants).  Single-draft (K must be 1) and modifies-later-targets
(Algorithm 2 records) are declared on the numpy ``Rule`` and read from it.  The claims'
tables, ``spectr-gbv certify``'s plan, the engine's and the benchmark's rule sets, the CLI
choices and help texts, and the tests all read it, so adding a rule is: the reference module,
the torch module and one ``register(RuleSpec(...))`` call (docs/adding_a_rule.md).

The registry names no torch class: a torch verifier names the numpy rule it ports
(``gpu_backend.verifiers.base.Verifier.reference``) and a planted defect's torch class names its
defect (``Verifier.planted_as``); ``gpu_backend.verifiers`` maps a rule to its torch verifier
through its reference rule's class, and ``gpu_backend.certify.planted`` a planted defect to its
class through its name.

The registry is live: a rule registered at run time (e.g. by a test, or by a user's package
before calling the CLI) appears in every derived list.  ``gpu_backend.verifiers`` checks at
import that every built-in rule has a torch verifier, ``gpu_backend.certify.planted`` that every
built-in planted defect has a class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from spectr_gbv.reference.rules.base import Rule


@dataclass(frozen=True)
class Planted:
    """A planted defect of a rule: its torch verifier with one deliberate, law-relevant change
    (a negative control).  ``spectr-gbv certify`` certifies it against the rule's exact law on
    its toy case (``gpu_backend.certify.suite.planted_case``) and must catch it (tests/cli/test_certify_cli.py also asks p < 1e-40 at
    N = 5,000 and that the rule itself passes the same case).

    Attributes:
        name: the planted rule's name (a certify row; must not be a registered rule's name).
        description: one line for the report.
        K, L, V: the toy case's shape (oracle.certify_cases.toy_models(V, models_seed), drafts
            seeded from draft_seed; the first non-degenerate seed is taken, as every toy case).
        models_seed, draft_seed: its seeds.
        engine: ``spectr-gbv certify our-engine`` runs it too and must catch it by the law of τ
            (only for defects that change τ's law and were measured on the engine).
        base: the rule it deviates from (filled in by ``RuleSpec``).
    """

    name: str
    description: str
    K: int
    L: int
    V: int
    models_seed: int
    draft_seed: int
    engine: bool = False
    base: str = ""


@dataclass(frozen=True)
class RuleSpec:
    """What the project knows about one rule.

    The rule's own facts — ``single_draft`` (K must be 1) and ``modifies_targets`` (it returns
    Algorithm 2 records that later iterations must carry) — are declared once, on the numpy
    ``Rule`` class (and its parameters); the spec reads them from ``reference()`` and the torch
    ``Verifier`` reads them from the numpy rule it ports (``Verifier.reference``, which is also
    how ``gpu_backend.verifiers`` finds a rule's torch verifier).

    Attributes:
        name: registry name (CLI ``--rule``, ``get_rule``, ``get_verifier``).
        reference: zero-argument callable returning the numpy reference ``Rule``.
        lossless: the project proves and certifies it lossless (False: implemented
            faithfully, checked against its own law only).
        citation: where the rule comes from (paper, algorithm).
        summary: one line for help texts.
        params: keyword parameters of both implementations (e.g. ``algorithm2=True``).
        bench: in the engine benchmark's default method set (False for rules too slow at a
            real vocabulary, e.g. MDBV's host plan).
        draft_stopping: the rule stays lossless when the block length is chosen while drafting
            from draft-side information only (reference.draft_stopping); declared from the
            exact check of proofs_check/DRAFT_STOPPING.md, which a test repeats for every
            registered rule.  False (the safe default) refuses stopping in the engine.
        varying_draft_rows: the rule stays lossless when a draft row depends on more than its
            prefix — on how earlier tokens were batched into forward calls and, at K ≥ 2, on the
            other drafts' earlier tokens — as long as drafts that share a prefix share its row
            and the verifier gets the rows the tokens were drawn from.  An int8 dynamically
            quantised draft (``gpu_backend.models.draft_quant``) has such rows: its activation scale is
            computed per forward call.  True for rules that decide position by position (token
            verification, K-SEQ: given the history, the next accepted token is verified against
            proposals drawn i.i.d. from one row) and for BV at K = 1 (lossless for any draft
            law of the block given through its conditionals); False (the safe default) for
            rules that need i.i.d. draft blocks or carry the draft's joint into the next
            iteration (Algorithm 2).  The engine refuses a quantised draft for the others.

    Certification (certify/suite.py, ``spectr-gbv certify``, the tests):
        planted: the rule's planted defects (``Planted``; at least one: certify must catch each).
        distinctive_seeds: (toy, rows) draft seeds of the rule's distinctive cases, which
            replace the generic V = 4,096 case: V = 3, K = L = 3 on toy_models(3, 12) and
            V = 4,096, K = L = 2 on large_models(4096, 21), seeds scanned so that the rule's law
            is at TV ≥ 0.05 from the other multi-draft rules (suite.DISTINCT_FROM).  None: the
            generic cases (suite.large_case).
        rows_L: L of the generic V = 4,096 case (SpecTr: 1, its ρ* beyond depth 1 is solved
            per row, ~0.3 ms per row at V = 4,096 on a CPU).
        engine_skip: why ``spectr-gbv certify our-engine`` cannot certify the rule (None: it can).
        coverage_seeds: (V, K, models_seed, draft_seed) of the rule's branch-coverage case
            (suite.coverage_case: L = 3, float32, draft and target independent random models
            oracle.certify_cases.coverage_models(V, models_seed)), chosen by a scan so that every
            outcome class the rule's code distinguishes (oracle.branches) has exact probability
            ≥ suite.COVERAGE_FLOOR.  None: no such case (a rule registered at run time).
        test_variants: the parameter overrides the generic torch-vs-reference tests run
            (tests/helpers/verifier_cases.py RULE_VARIANTS; ``{}``: the registered
            parameters).  Empty for the merged-tree rules, which have their own fuzz
            (test_verifiers_matched.py TREE_RULES).

    Read from the reference rule (not arguments):
        single_draft, modifies_targets: ``reference()``'s.
    """

    name: str
    reference: Callable[[], Rule]
    lossless: bool
    citation: str
    summary: str
    params: dict = field(default_factory=dict)
    bench: bool = True
    draft_stopping: bool = False
    varying_draft_rows: bool = False
    planted: tuple[Planted, ...] = ()
    distinctive_seeds: tuple[int, int] | None = None
    rows_L: int = 2
    engine_skip: str | None = None
    coverage_seeds: tuple[int, int, int, int] | None = None
    test_variants: tuple[dict, ...] = ({},)
    single_draft: bool = field(init=False, repr=False)
    modifies_targets: bool = field(init=False, repr=False)

    def __post_init__(self):
        rule = self.reference()
        object.__setattr__(self, "single_draft", bool(rule.single_draft))
        object.__setattr__(self, "modifies_targets", bool(rule.modifies_targets))
        object.__setattr__(self, "planted", tuple(dataclasses.replace(p, base=self.name)
                                                  for p in self.planted))


_SPECS: dict[str, RuleSpec] = {}


def register(spec: RuleSpec) -> RuleSpec:
    """Add ``spec`` to the registry (its position fixes the order of every derived list).

    Raises:
        ValueError: the name is taken or empty, or a planted defect's name is empty, a
            registered rule's or another planted defect's.
    """
    if not spec.name or spec.name in _SPECS:
        raise ValueError(f"rule name {spec.name!r} is empty or already registered")
    taken = set(_SPECS) | {spec.name} | set(planted())
    for p in spec.planted:
        if not p.name or p.name in taken:
            raise ValueError(f"rule {spec.name!r}: planted defect name {p.name!r} is empty or taken")
        taken.add(p.name)
    _SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a rule (tests that register a throwaway rule clean up with it)."""
    _SPECS.pop(name, None)


def spec(name: str) -> RuleSpec:
    """The spec registered under ``name``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown rule {name!r}; known rules: {', '.join(_SPECS)}") from None


def specs() -> tuple[RuleSpec, ...]:
    """Every registered spec, in registration order."""
    return tuple(_SPECS.values())


def names(*, lossless: bool | None = None, single_draft: bool | None = None,
          modifies_targets: bool | None = None, bench: bool | None = None,
          draft_stopping: bool | None = None, varying_draft_rows: bool | None = None) -> tuple[str, ...]:
    """Registered names in registration order, filtered by the properties given (None: any)."""
    return tuple(s.name for s in _SPECS.values()
                 if (lossless is None or s.lossless == lossless)
                 and (single_draft is None or s.single_draft == single_draft)
                 and (modifies_targets is None or s.modifies_targets == modifies_targets)
                 and (bench is None or s.bench == bench)
                 and (draft_stopping is None or s.draft_stopping == draft_stopping)
                 and (varying_draft_rows is None or s.varying_draft_rows == varying_draft_rows))


def planted() -> dict[str, Planted]:
    """Every registered rule's planted defects by name, in registration order."""
    return {p.name: p for s in _SPECS.values() for p in s.planted}


def engine_skipped() -> dict[str, str]:
    """The rules ``spectr-gbv certify our-engine`` cannot certify, with the reason."""
    return {s.name: s.engine_skip for s in _SPECS.values() if s.engine_skip}


def is_single_draft(name: str) -> bool:
    """Whether rule ``name`` takes K = 1 only (ValueError for an unknown name)."""
    return spec(name).single_draft


def default_K(name: str, multi: int) -> int:
    """K for ``name``: 1 for a single-draft rule, else ``multi``."""
    return 1 if is_single_draft(name) else multi


def help_text() -> str:
    """"name: summary" of every rule, for CLI help."""
    return "; ".join(f"{s.name}: {s.summary}" for s in _SPECS.values())


def _builtin() -> None:
    from spectr_gbv.reference.rules.bv import BlockVerification
    from spectr_gbv.reference.rules.gbv import GreedyBlockVerification
    from spectr_gbv.reference.rules.kseq_bv import KSeqBV
    from spectr_gbv.reference.rules.kseq_gbv import KSeqGBV
    from spectr_gbv.reference.rules.mdbv import MDBVKSeq, MultiDraftBlockVerification
    from spectr_gbv.reference.rules.sd import TokenVerification
    from spectr_gbv.reference.rules.spectr import SpecTr
    from spectr_gbv.reference.rules.spectr_gbv import SpecTrGBV
    from spectr_gbv.reference.rules.traversal import TraversalVerification

    mdbv_host = "its reference rule plans every row on the host (seconds to minutes per iteration at a real vocabulary)"
    for s in (
        RuleSpec("sd", TokenVerification, coverage_seeds=(5, 1, 38, 16), lossless=True,
                 citation="Leviathan et al. 2023, Alg. 1; Chen et al. 2023", summary="token verification",
                 draft_stopping=True, varying_draft_rows=True,
                 planted=(Planted("planted_sd_shared_uniform", "token verification with one uniform shared by the block", 1, 3, 3, 9, 2),)),
        RuleSpec("spectr", SpecTr, coverage_seeds=(5, 3, 23, 7), lossless=True,
                 citation="Sun et al., SpecTr, NeurIPS 2023, K-SEQ (Alg. 3)", summary="SpecTr K-SEQ, K drafts",
                 draft_stopping=True, varying_draft_rows=True, rows_L=1,
                 planted=(Planted("planted_spectr_rho1", "K-SEQ (SpecTr) with rho = 1 at K = 2", 2, 2, 3, 5, 3, engine=True),)),
        RuleSpec("bv", BlockVerification, coverage_seeds=(5, 1, 24, 15), lossless=True,
                 citation="Sun et al., Block Verification, ICLR 2025, Alg. 2", summary="block verification",
                 draft_stopping=True, varying_draft_rows=True,
                 planted=(Planted("planted_bv_shared_uniform", "BV with one uniform shared by the block", 1, 3, 3, 9, 2, engine=True),
                          Planted("planted_bv_first_failure", "BV stopping at the first failed coin", 1, 3, 3, 9, 2, engine=True))),
        RuleSpec("gbv", lambda: GreedyBlockVerification(algorithm2=True),
                 coverage_seeds=(5, 1, 24, 15), lossless=True, citation="Lin et al. 2026 (SpecTr-GBV), GBV baseline with Alg. 2",
                 summary="greedy block verification with Algorithm 2", params={"algorithm2": True},
                 planted=(Planted("planted_gbv_first_failure", "GBV stopping at the first failed coin", 1, 3, 3, 9, 2, engine=True),),
                 test_variants=({}, {"algorithm2": False})),
        RuleSpec("spectr_gbv", lambda: SpecTrGBV(residual="released", algorithm2=False),
                 coverage_seeds=(3, 3, 34, 2), lossless=False, citation="Lin et al. 2026, arXiv 2604.25925, Alg. 1 as released",
                 summary="SpecTr-GBV as released (lossy for K >= 2)",
                 params={"residual": "released", "algorithm2": False},
                 planted=(Planted("planted_spectr_gbv_shared_coins",
                                  "released SpecTr-GBV with every draft reading draft 0's coins", 3, 3, 3, 12, 12),),
                 test_variants=({}, {"residual": "consistent"})),
        RuleSpec("spectr_gbv_fixed", lambda: SpecTrGBV(residual="consistent", algorithm2=True), coverage_seeds=(3, 3, 34, 2), lossless=False,
                 citation="Lin et al. 2026, Alg. 1 with the (1 - m)^K residual and Alg. 2",
                 summary="SpecTr-GBV, consistent residual + Algorithm 2 (still lossy)",
                 params={"residual": "consistent", "algorithm2": True}, bench=False,
                 planted=(Planted("planted_spectr_gbv_fixed_shared_coins",
                                  "SpecTr-GBV (consistent residual, Alg. 2) with every draft reading draft 0's coins", 3, 3, 3, 12, 12),)),
        RuleSpec("kseq_gbv", lambda: KSeqGBV(algorithm2=True), coverage_seeds=(3, 3, 4, 11), lossless=True,
                 citation="this project (docs: K-SEQ-GBV)", summary="lossless greedy multi-draft (K-SEQ-GBV)",
                 params={"algorithm2": True},
                 planted=(Planted("planted_kseq_gbv_rho1", "K-SEQ-GBV with rho = 1 at K = 2", 2, 2, 3, 5, 3, engine=True),)),
        RuleSpec("kseq_bv", KSeqBV, coverage_seeds=(3, 3, 4, 11), lossless=True,
                 citation="this project: K-SEQ over the drafts, BV along the winner", summary="K-SEQ-BV",
                 draft_stopping=True, distinctive_seeds=(14, 29), test_variants=(),
                 planted=(Planted("planted_kseq_bv_rho1", "K-SEQ-BV with rho = 1 at K = 2", 2, 2, 3, 5, 3),)),
        RuleSpec("traversal", TraversalVerification, coverage_seeds=(5, 2, 24, 7), lossless=True,
                 citation="Weng et al., Traversal Verification, NeurIPS 2025",
                 summary="Traversal Verification on the merged tree", draft_stopping=True,
                 distinctive_seeds=(14, 29), test_variants=(),
                 planted=(Planted("planted_traversal_stale_alpha",
                                  "Traversal Verification keeping a parent's acceptance probability when it deletes a child", 3, 3, 3, 12, 14),)),
        # MDBV accepts the whole block of toy seed 14
        RuleSpec("mdbv", MultiDraftBlockVerification, coverage_seeds=(3, 3, 19, 13), lossless=True,
                 citation="this project: multi-draft block verification (proofs_check/NON_MODIFYING_RULES.md)",
                 summary="multi-draft block verification (host plan: slow at large V)", bench=False,
                 draft_stopping=True, distinctive_seeds=(15, 29), engine_skip=mdbv_host, test_variants=(),
                 planted=(Planted("planted_mdbv_shared_coins",
                                  "MDBV with every node reading draft 0's coin at its depth", 3, 3, 3, 12, 15),)),
        # at rows seed 29 MDBV-KSEQ's law is within TV 0.05 of SpecTr's: 38
        RuleSpec("mdbv_kseq", MDBVKSeq, coverage_seeds=(4, 3, 36, 17), lossless=True,
                 citation="this project: MDBV with K-SEQ node selection (proofs_check/NON_MODIFYING_RULES.md §8)",
                 summary="MDBV with K-SEQ at every node (batched, no host plan)", draft_stopping=True,
                 distinctive_seeds=(16, 38), test_variants=(),
                 planted=(Planted("planted_mdbv_kseq_fallback",
                                  "MDBV-KSEQ falling back with probability w at inner nodes", 3, 3, 3, 12, 16, engine=True),)),
    ):
        register(s)


_builtin()
