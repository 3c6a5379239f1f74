"""The one registry of verification rules: every list of rules in the project derives from it.

Per rule: its name, how to build the numpy reference, the torch verifier class (as a dotted
path, so this module stays numpy-only), its parameters, and the facts the rest of the project
asks about — single-draft (K must be 1), lossless (certified and proved as such),
modifies later targets (Algorithm 2 records), citation and a one-line summary.  The claims'
tables, ``spectr-gbv certify``'s plan, the engine's and the benchmark's rule sets, the CLI
choices and help texts all read it, so adding a rule is: the reference module, the torch module
and one ``register(RuleSpec(...))`` call (README, "Adding a rule").

The registry is live: a rule registered at run time (e.g. by a test, or by a user's package
before calling the CLI) appears in every derived list.  ``gpu_backend.verifiers`` checks at
import that every registered torch class exists and carries the rule's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from spectr_gbv.reference.rules.base import Rule


@dataclass(frozen=True)
class RuleSpec:
    """What the project knows about one rule.

    Attributes:
        name: registry name (CLI ``--rule``, ``get_rule``, ``get_verifier``).
        reference: zero-argument callable returning the numpy reference ``Rule``.
        torch: "module:Class" of the batched torch verifier (``gpu_backend.verifiers.base.
            Verifier`` subclass), imported only when a torch verifier is asked for; or the
            class itself (a rule defined in a notebook or a test).
        params: keyword parameters of both implementations (e.g. ``algorithm2=True``).
        single_draft: the rule is defined for K = 1 only.
        lossless: the project proves and certifies it lossless (False: implemented
            faithfully, checked against its own law only).
        modifies_targets: it returns Algorithm 2 records that later iterations must carry.
        citation: where the rule comes from (paper, algorithm).
        summary: one line for help texts.
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
    """

    name: str
    reference: Callable[[], Rule]
    torch: str | type
    single_draft: bool
    lossless: bool
    modifies_targets: bool
    citation: str
    summary: str
    params: dict = field(default_factory=dict)
    bench: bool = True
    draft_stopping: bool = False
    varying_draft_rows: bool = False


_SPECS: dict[str, RuleSpec] = {}


def register(spec: RuleSpec) -> RuleSpec:
    """Add ``spec`` to the registry (its position fixes the order of every derived list).

    Raises:
        ValueError: the name is taken or empty, or the spec contradicts its reference rule
            (``single_draft`` or ``modifies_targets`` differ from the built Rule's).
    """
    if not spec.name or spec.name in _SPECS:
        raise ValueError(f"rule name {spec.name!r} is empty or already registered")
    rule = spec.reference()
    if bool(rule.single_draft) != spec.single_draft or bool(rule.modifies_targets) != spec.modifies_targets:
        raise ValueError(f"rule {spec.name!r}: the spec says single_draft={spec.single_draft}, "
                         f"modifies_targets={spec.modifies_targets}, its reference rule "
                         f"{rule!r} says {rule.single_draft}, {rule.modifies_targets}")
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

    v = "spectr_gbv.gpu_backend.verifiers."
    for s in (
        RuleSpec("sd", TokenVerification, v + "sd:TokenVerification", True, True, False,
                 "Leviathan et al. 2023, Alg. 1; Chen et al. 2023", "token verification",
                 draft_stopping=True, varying_draft_rows=True),
        RuleSpec("spectr", SpecTr, v + "spectr:SpecTr", False, True, False,
                 "Sun et al., SpecTr, NeurIPS 2023, K-SEQ (Alg. 3)", "SpecTr K-SEQ, K drafts",
                 draft_stopping=True, varying_draft_rows=True),
        RuleSpec("bv", BlockVerification, v + "bv:BlockVerification", True, True, False,
                 "Sun et al., Block Verification, ICLR 2025, Alg. 2", "block verification",
                 draft_stopping=True, varying_draft_rows=True),
        RuleSpec("gbv", lambda: GreedyBlockVerification(algorithm2=True), v + "gbv:GreedyBlockVerification",
                 True, True, True, "Lin et al. 2026 (SpecTr-GBV), GBV baseline with Alg. 2",
                 "greedy block verification with Algorithm 2", {"algorithm2": True}),
        RuleSpec("spectr_gbv", lambda: SpecTrGBV(residual="released", algorithm2=False), v + "spectr_gbv:SpecTrGBV",
                 False, False, False, "Lin et al. 2026, arXiv 2604.25925, Alg. 1 as released",
                 "SpecTr-GBV as released (lossy for K >= 2)", {"residual": "released", "algorithm2": False}),
        RuleSpec("spectr_gbv_fixed", lambda: SpecTrGBV(residual="consistent", algorithm2=True),
                 v + "spectr_gbv:SpecTrGBV", False, False, True,
                 "Lin et al. 2026, Alg. 1 with the (1 - m)^K residual and Alg. 2",
                 "SpecTr-GBV, consistent residual + Algorithm 2 (still lossy)",
                 {"residual": "consistent", "algorithm2": True}, bench=False),
        RuleSpec("kseq_gbv", lambda: KSeqGBV(algorithm2=True), v + "kseq_gbv:KSeqGBV", False, True, True,
                 "this project (docs: K-SEQ-GBV)", "lossless greedy multi-draft (K-SEQ-GBV)",
                 {"algorithm2": True}),
        RuleSpec("kseq_bv", KSeqBV, v + "kseq_bv:KSeqBV", False, True, False,
                 "this project: K-SEQ over the drafts, BV along the winner", "K-SEQ-BV",
                 draft_stopping=True),
        RuleSpec("traversal", TraversalVerification, v + "traversal:TraversalVerification", False, True, False,
                 "Weng et al., Traversal Verification, NeurIPS 2025", "Traversal Verification on the merged tree",
                 draft_stopping=True),
        RuleSpec("mdbv", MultiDraftBlockVerification, v + "mdbv:MultiDraftBlockVerification", False, True, False,
                 "this project: multi-draft block verification (proofs_check/NON_MODIFYING_RULES.md)",
                 "multi-draft block verification (host plan: slow at large V)", bench=False,
                 draft_stopping=True),
        RuleSpec("mdbv_kseq", MDBVKSeq, v + "mdbv_kseq:MDBVKSeq", False, True, False,
                 "this project: MDBV with K-SEQ node selection (proofs_check/NON_MODIFYING_RULES.md §8)",
                 "MDBV with K-SEQ at every node (batched, no host plan)", draft_stopping=True),
    ):
        register(s)


_builtin()
