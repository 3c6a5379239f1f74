"""What a model spec names, known without loading it: the embedded models' vocabulary sizes,
local folders and ``.gguf`` files, and Hugging Face hub ids (cached, or the hub reachable).

``check_models`` is what ``spectr-gbv generate``, ``bench``, ``report`` and ``certify our-engine``
run on ``--target`` / ``--draft`` before any model is loaded (``models.pair.load_pair`` loads
them); its refusals are ``ValueError`` naming the argument.
"""

from __future__ import annotations

import json
import os
import re

# Vocabulary sizes of the embedded models (gpu_backend.models.weights.EMBEDDED_MODELS), known before
# loading them; any other model whose folder has no config.json is assumed to have the largest.
EMBEDDED_VOCAB = {
    "qwen2.5-coder-1.5b-instruct": 151_936,
    "qwen2.5-coder-0.5b-instruct": 151_936,
    "smollm2-135m-instruct": 49_152,
}
ASSUMED_VOCAB = max(EMBEDDED_VOCAB.values())

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def embedded_names() -> dict[str, str]:
    """Alias or canonical name → canonical name of the embedded models."""
    from spectr_gbv.gpu_backend.models.weights import EMBEDDED_MODELS, MODEL_ALIASES

    return {**{name: name for name in EMBEDDED_MODELS}, **MODEL_ALIASES}


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face endpoint accepts a TCP connection within ``timeout`` seconds."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _hub_cached_config(repo_id: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # invalid id, or huggingface_hub missing
        return None
    return path if isinstance(path, str) else None


def _config_vocab(path: str) -> int | None:
    try:
        with open(path) as fh:
            value = json.load(fh).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def check_model_spec(flag: str, spec: str, embedded: dict[str, str]) -> tuple[int, bool]:
    """Check a target or draft spec without loading it.

    Args:
        flag: the argument's name for the message (``--target`` on the command line).
        spec: an embedded name or alias, a local folder, a local ``.gguf`` file or a hub id.
        embedded: alias or canonical name → canonical name of the embedded models.
    Returns:
        (V, known): the vocabulary size (from the embedded table or the folder's config.json;
        ``ASSUMED_VOCAB`` with known = False otherwise).
    Raises:
        ValueError: empty, a local path that does not exist, not a valid hub id, or a hub id
            that is not cached while the hub is offline or unreachable.
    """
    names = ", ".join(sorted(embedded))
    if not spec or not spec.strip():
        raise ValueError(f"{flag} must name a model (embedded: {names}; or a folder, .gguf file or hub id)")
    canonical = embedded.get(spec)
    if canonical is not None:
        return EMBEDDED_VOCAB.get(canonical, ASSUMED_VOCAB), canonical in EMBEDDED_VOCAB
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        cfg = os.path.join(path, "config.json")
        if not os.path.isfile(cfg):
            raise ValueError(f"{flag} {spec}: folder has no config.json (not a model saved with save_pretrained)")
        vocab = _config_vocab(cfg)
        return (vocab, True) if vocab else (ASSUMED_VOCAB, False)
    if spec.endswith(".gguf"):
        if os.path.isfile(path):
            return ASSUMED_VOCAB, False
        raise ValueError(f"{flag} {spec}: no such .gguf file")
    if os.path.exists(path):
        raise ValueError(f"{flag} {spec}: a file that is not a .gguf model (give a model folder, a .gguf "
                         f"file, a hub id or an embedded model: {names})")
    if spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").replace("/", "", 1):
        raise ValueError(f"{flag} {spec}: no such model folder or .gguf file (embedded models: {names})")
    if not HUB_ID.match(spec):
        raise ValueError(f"{flag} {spec!r}: not an embedded model ({names}), a local folder or .gguf "
                         "file, nor a Hugging Face hub id")
    cached = _hub_cached_config(spec)
    if cached:
        vocab = _config_vocab(cached)
        return (vocab, True) if vocab else (ASSUMED_VOCAB, False)
    why = ("the hub is offline (HF_HUB_OFFLINE)" if hub_offline()
           else "huggingface.co cannot be reached (no network)" if not hub_reachable() else None)
    if why:
        raise ValueError(f"{flag} {spec}: not an embedded model ({names}) nor a local folder or .gguf "
                         f"file, not in the Hugging Face cache, and {why}")
    return ASSUMED_VOCAB, False


def check_models(target: str, draft: str | None) -> tuple[int, bool]:
    """``target`` (and ``draft`` unless None) resolvable without loading them.

    Returns:
        (V, known) of the target (``check_model_spec``).
    Raises:
        ValueError: naming ``--target`` or ``--draft`` and the model.
    """
    names = embedded_names()
    vocab = check_model_spec("--target", target, names)
    if draft is not None:
        check_model_spec("--draft", draft, names)
    return vocab
