"""What the engine accepts of a rule: one function per policy, one message each.

The engine (``gpu_backend.engine.speculative.SpeculativeEngine``), the int8 draft's mode
(``gpu_backend.models.draft_quant.resolve_mode``) and the command line (``spectr-gbv exact`` and
``generate``) call these, so a refusal reads the same wherever it is made; ``name`` is the
argument the caller was given (``"K"`` in the engine, ``"--K"`` on the command line).

Imports the rule registry only (no torch): the command line checks its flags before loading
anything.
"""

from __future__ import annotations

from spectr_gbv.reference.rules import registry


def known_rules() -> tuple[str, ...]:
    """The rule names the engine can run: the registry's (``reference.rules.registry``)."""
    return registry.names()


def check_draft_count(rule: str, K: int, name: str = "K") -> None:
    """K = 1 for a single-draft rule (registry ``single_draft``); "ar" drafts nothing and passes.

    Raises:
        ValueError: ``NAME must be 1 for the single-draft rule 'R', got K``; an unknown rule
            (the registry's message).
    """
    if rule != "ar" and registry.is_single_draft(rule) and K != 1:
        raise ValueError(f"{name} must be 1 for the single-draft rule {rule!r}, got {K}")


def check_draft_stopping(rule: str, name: str = "draft_stop") -> None:
    """Draft-side stopping (``reference.draft_stopping``) only for a rule whose registry entry
    declares ``draft_stopping`` (proved lossless under stopping, proofs_check/DRAFT_STOPPING.md).

    Raises:
        ValueError: rule "ar" (it drafts nothing), or a rule not certified under stopping
            (the message lists those that are).
    """
    if rule == "ar":
        raise ValueError(f"{name}: rule 'ar' drafts nothing; drop {name} or pick a speculative rule")
    if not registry.spec(rule).draft_stopping:
        raise ValueError(f"{name}: rule {rule!r} is not certified lossless when drafting stops early "
                         f"(proofs_check/DRAFT_STOPPING.md); rules that are: "
                         f"{', '.join(registry.names(draft_stopping=True))}")


def check_varying_draft_rows(rule: str, name: str = "draft") -> None:
    """A dynamically quantised (int8) draft, whose rows depend on the batching of each call,
    only for a rule whose registry entry declares ``varying_draft_rows``
    (gpu_backend/models/draft_quant.py).

    Raises:
        ValueError: rule "ar" (it drafts nothing), or a rule not lossless under such rows (the
            message lists those that are).
    """
    if rule == "ar":
        raise ValueError(f"{name}: rule 'ar' drafts nothing; drop the draft quantisation or pick a "
                         "speculative rule")
    if not registry.spec(rule).varying_draft_rows:
        raise ValueError(f"{name}: a dynamically quantised draft has rows that depend on the batching "
                         f"of each call, and rule {rule!r} is not lossless with an int8 dynamic draft "
                         f"(gpu_backend/models/draft_quant.py); rules that are: "
                         f"{', '.join(registry.names(varying_draft_rows=True))}")
