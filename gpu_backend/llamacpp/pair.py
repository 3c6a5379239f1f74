"""Loading a draft/target pair on llama.cpp (``LlamaCppModel``) and checking that it fits
together: the same logits axis and the same vocabulary, token by token.

The prompt is encoded, and the output decoded, by the target GGUF's tokenizer as transformers
reads it (``AutoTokenizer.from_pretrained(gguf_file=...)``), the same tokenizer the torch
backend uses, so that both backends see one prompt as the same ids.
"""

from __future__ import annotations

from pathlib import Path


def gguf_path(spec: str) -> Path:
    """The GGUF file of ``spec``: an embedded model (name or alias; its parts joined and
    hash-checked by ``weights.materialize_gguf``) or a local ``.gguf`` file.

    Raises:
        ValueError: ``spec`` is neither (a folder or hub id has no GGUF for llama.cpp).
        FileNotFoundError: from ``materialize_gguf`` (a data package is missing).
    """
    from spectr_gbv.gpu_backend.models.weights import EMBEDDED_MODELS, MODEL_ALIASES, materialize_gguf

    canonical = MODEL_ALIASES.get(spec, spec)
    if canonical in EMBEDDED_MODELS:
        return materialize_gguf(canonical)
    path = Path(spec).expanduser()
    if spec.endswith(".gguf") and path.is_file():
        return path.resolve()
    raise ValueError(f"{spec!r}: the llama.cpp backend runs GGUF files: an embedded model "
                     f"({sorted(EMBEDDED_MODELS)}) or a local .gguf file (use --backend torch "
                     "for a folder or a hub id)")


def is_gguf_spec(spec: str | None) -> bool:
    """Whether ``spec`` names a GGUF file (an embedded model or a local ``.gguf`` path)."""
    if spec is None:
        return True
    try:
        from spectr_gbv.gpu_backend.models.weights import EMBEDDED_MODELS, MODEL_ALIASES
    except ImportError:
        return False
    return MODEL_ALIASES.get(spec, spec) in EMBEDDED_MODELS or spec.endswith(".gguf")


def load_tokenizer(path: Path):
    """transformers' tokenizer of the GGUF file ``path`` (the torch backend's tokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def load_llamacpp_pair(target: str = "target", draft: str | None = "draft", threads: int | None = None,
                       n_ctx: int | None = None):
    """Load target and draft on llama.cpp and check them (``check_llamacpp_pair``).

    Args:
        target, draft: embedded model names / aliases or local ``.gguf`` files; ``draft``
            None loads the target only.
        threads: llama.cpp threads (None: every core).
        n_ctx: cache cells per model (default ``model.DEFAULT_N_CTX``).
    Returns:
        ``models.pair.ModelPair`` (tokenizer: transformers' reading of the target GGUF;
        backend: ``llamacpp.backend.LLAMACPP``).
    Raises:
        models.pair.ModelLoadError: a model cannot be loaded (the role and the spec named).
        ValueError: the pair does not fit (``check_llamacpp_pair``).
    """
    from spectr_gbv.gpu_backend.llamacpp.backend import LLAMACPP, check_llamacpp_pair
    from spectr_gbv.gpu_backend.llamacpp.model import DEFAULT_N_CTX, LlamaCppModel
    from spectr_gbv.gpu_backend.models.eos import eos_token_ids
    from spectr_gbv.gpu_backend.models.pair import ModelLoadError, ModelPair
    from spectr_gbv.gpu_backend.models.weights import MODEL_ALIASES

    def load(role: str, spec: str):
        try:
            path = gguf_path(spec)
            return path, LlamaCppModel(path, n_ctx=n_ctx or DEFAULT_N_CTX, threads=threads,
                                       name=MODEL_ALIASES.get(spec, spec))
        except (OSError, ValueError) as err:
            raise ModelLoadError(role, spec, err) from err

    t_path, t_model = load("target", target)
    d_model = None
    if draft is not None:
        _, d_model = load("draft", draft)
        check_llamacpp_pair(d_model, t_model)
    tokenizer = load_tokenizer(t_path)
    if len(tokenizer) > t_model.V:
        raise ValueError(f"target {target}: transformers' tokenizer has {len(tokenizer):,} tokens but "
                         f"llama.cpp's vocabulary {t_model.V:,}")
    return ModelPair(t_model, d_model, tokenizer, eos_token_ids(t_model, tokenizer),
                     f"target {MODEL_ALIASES.get(target, target)}"
                     + (f", draft {MODEL_ALIASES.get(draft, draft)}" if draft else "")
                     + ", GGUF on llama.cpp", backend=LLAMACPP)


BACKENDS = ("auto", "torch", "llama.cpp")


def resolve_backend(backend: str, target: str, draft: str | None, name: str = "backend") -> str:
    """The backend a generation runs on.

    "auto" (``spectr-gbv generate``'s default): llama.cpp when llama-cpp-python is installed
    and the target (and the draft, unless None) are GGUF files (embedded models or local
    ``.gguf``): the files are then used as they are, on llama.cpp's kernels; torch
    (transformers) otherwise.  "llama.cpp" and "torch" are taken as given.

    Raises:
        ValueError: an unknown backend, or "llama.cpp" asked for a model that is not a GGUF
            file, or without llama-cpp-python installed (naming the argument ``name``: the
            command line's ``--backend``).
    """
    from spectr_gbv.gpu_backend.llamacpp.model import available

    if backend not in BACKENDS:
        raise ValueError(f"{name} must be one of {', '.join(BACKENDS)}, got {backend!r}")
    gguf = is_gguf_spec(target) and is_gguf_spec(draft)
    if backend == "auto":
        return "llama.cpp" if gguf and available() else "torch"
    if backend == "llama.cpp":
        if not available():
            raise ValueError(f"{name} llama.cpp: llama-cpp-python is not installed "
                             "(scripts/install.sh installs llama-cpp-python==0.3.36)")
        if not gguf:
            bad = target if not is_gguf_spec(target) else draft
            raise ValueError(f"{name} llama.cpp runs GGUF files (an embedded model or a .gguf "
                             f"file), not {bad!r}")
    return backend
