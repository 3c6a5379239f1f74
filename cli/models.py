"""``--target`` / ``--draft`` of generate, bench, report and certify our-engine: the library's
checks (``gpu_backend.models.catalog``, ``gpu_backend.engine.memory``) and loader
(``gpu_backend.models.pair``) with their refusals as one-line ``UsageError``s naming the flags."""

from __future__ import annotations

from spectr_gbv.cli.args import UsageError, first_line, usage_errors


def check_models(target: str, draft: str | None) -> tuple[int, bool]:
    """``gpu_backend.models.catalog.check_models``: (V, known) of the target."""
    from spectr_gbv.gpu_backend.models.catalog import check_models as check

    with usage_errors():
        return check(target, draft)


def check_engine_memory(K: int, L: int, V: int, known_vocab: bool, flags: str) -> None:
    """``gpu_backend.engine.memory.check_engine_memory``, naming ``flags``."""
    from spectr_gbv.gpu_backend.engine.memory import check_engine_memory as check

    with usage_errors():
        check(K, L, V, known_vocab, flags)


def load_models(target: str, draft: str | None, dtype: str, draft_quant: str = "none"):
    """``gpu_backend.models.pair.load_pair`` with its errors as one-line UsageErrors naming the flags.

    Returns:
        ``ModelPair`` (draft None when not asked for).
    Raises:
        UsageError: ``--target SPEC: cannot load the model: ...`` (or ``--draft``), or
            ``--draft D and --target T: ...`` when they do not fit together.
    """
    from spectr_gbv.gpu_backend.models.pair import ModelLoadError, load_pair

    try:
        return load_pair(target, draft, dtype, draft_quant)
    except ModelLoadError as err:
        raise UsageError(f"--{err.role} {err.spec}: cannot load the model: "
                         f"{first_line(err.__cause__)}") from None
    except ValueError as err:
        raise UsageError(f"--draft {draft} and --target {target}: {first_line(err)}") from None
