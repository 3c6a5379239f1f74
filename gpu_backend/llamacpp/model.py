"""A GGUF model run by llama.cpp's kernels (``llama-cpp-python``, its low-level C API), as the
speculative engine's draft or target: the file is used as it is (quantised blocks stay
quantised; nothing is dequantised), one llama.cpp context holds the KV cache of up to
``n_seq_max`` sequences in ONE unified buffer, and ``decode`` returns float32 logits of the
positions asked for.

Terms (llama.cpp's): a *sequence* (``seq_id``) is one line of the cache; a cache cell holds
one token at one position and belongs to a *set* of sequences.  A token fed with several
sequence ids is computed once and seen by all of them: that is how the engine feeds a draft
tree (``gpu_backend.llamacpp.layout``): a node shared by drafts k₁, k₂ carries both ids.  With
the unified cache (``kv_unified``), copying a sequence (``seq_cp``) only adds an id to cells,
and removing one (``seq_rm``) frees a cell once no sequence holds it.  llama.cpp masks a
token's attention to the cells of the token's first sequence id at positions ≤ its own
(``llama_kv_cache::set_input_kq_mask``): for a tree node that is exactly the context, its
ancestors and itself, whichever of its drafts comes first.

Weight buffers: llama.cpp can move weights into "extra" buffer types at load (AMX tiles where
the build has AMX kernels, repacked interleaved layouts otherwise).  With the AMX buffer type
llama.cpp 0.3.36 crashed the process (a general protection fault in libggml-cpu) on the first
batch of more than one token, its own ``Llama`` included (docs/upstream/llamacpp_amx_segfault.md;
ggml-org/llama.cpp#20824), so a build with AMX kernels loads without extra buffer types
(``default_extra_buffers``); elsewhere llama.cpp's default stands.

What is refused (``ValueError``/``OSError`` naming the argument): a path that is not a
readable GGUF file, n_ctx / n_seq_max out of range, a batch that does not fit, token ids
outside [0, V), a decode that llama.cpp reports failed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

DEFAULT_N_CTX = 4096
DEFAULT_N_SEQ_MAX = 8
DEFAULT_N_BATCH = 512

_init_lock = threading.Lock()
_initialised = False
_log_callback = None  # kept alive: llama.cpp holds the pointer


def available() -> bool:
    """Whether ``llama_cpp`` (llama-cpp-python) can be imported."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def _lib():
    """``llama_cpp`` after ``llama_backend_init`` (once per process), its log quietened to
    errors (llama.cpp prints every tensor it loads otherwise)."""
    global _initialised, _log_callback
    try:
        import llama_cpp
    except ImportError as err:
        raise ImportError("the llama.cpp backend needs llama-cpp-python==0.3.36 "
                          "(scripts/install.sh installs it)") from err
    with _init_lock:
        if not _initialised:
            llama_cpp.llama_backend_init()

            @llama_cpp.llama_log_callback
            def quiet(level, text, user_data):  # GGML_LOG_LEVEL_ERROR = 4
                if level == 4:
                    os.write(2, text)

            _log_callback = quiet
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            _initialised = True
    return llama_cpp


def default_extra_buffers(system_info: str | None = None) -> bool:
    """Whether models load with llama.cpp's extra weight buffer types (module docstring): False
    where the CPU backend was built with AMX kernels, i.e. ``llama_print_system_info`` (or
    ``system_info``) reports ``AMX_INT8 = 1``; True otherwise (llama.cpp's default)."""
    if system_info is None:
        system_info = _lib().llama_print_system_info().decode(errors="replace")
    return "AMX_INT8 = 1" not in system_info


@dataclass(frozen=True)
class Feed:
    """Tokens for one ``decode`` call (one llama.cpp batch).

    Attributes:
        tokens: token ids, one per new cache cell.
        positions: the position of each token (same length).
        seqs: the sequence ids of each token (a non-empty tuple each; same length).
        logits: indices into ``tokens`` whose logits are wanted, increasing.
    """

    tokens: tuple
    positions: tuple
    seqs: tuple
    logits: tuple


def build_description(extra_buffers: bool | None = None) -> str:
    """What a measurement on this backend depends on besides the CPU and the model: the
    llama-cpp-python version, the CPU features its build reports (``llama_print_system_info``,
    those ``= 1``) and whether weights load into extra buffer types (None:
    ``default_extra_buffers()``).  One line; part of ``tuning.autoconfig``'s cache key of costs,
    so a rebuilt or upgraded llama.cpp is timed again."""
    lib = _lib()
    info = lib.llama_print_system_info().decode(errors="replace")
    # "CPU : SSE3 = 1 | AVX2 = 1 | ... |": the names of the features = 1
    features = [f.split("=")[0].split(":")[-1].strip() for f in info.split("|") if f.strip().endswith("= 1")]
    extra = default_extra_buffers(info) if extra_buffers is None else bool(extra_buffers)
    return (f"llama-cpp-python {lib.__version__}; built with {', '.join(features)}; "
            f"extra weight buffers {'on' if extra else 'off'}")


class LlamaCppModel:
    """One GGUF model and one llama.cpp context.

    Args:
        path: a ``.gguf`` file.
        n_ctx: cache cells (all sequences together: the cache is unified).
        n_seq_max: the most sequences (drafts K of an iteration) the context serves.
        threads: llama.cpp threads for single-token and batch decoding (None: every core).
        n_batch: the most tokens one llama.cpp batch takes (longer feeds are split; only a
            prompt can be longer).
        name: how messages name the model (default: the file's name).
        extra_buffers: load the weights into llama.cpp's extra buffer types (AMX, repacked);
            None: ``default_extra_buffers()`` (off where llama.cpp's AMX path would crash).
    Attributes:
        V: the logits axis (``llama_vocab_n_tokens``: Qwen2.5's GGUF pads it to 151,936).
        config: ``eos_token_id`` (llama.cpp's EOS of the vocabulary), ``vocab_size``: what the
            engine reads from a transformers config.
        build: ``build_description(extra_buffers)`` (what its timings depend on).
    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: n_ctx, n_seq_max, n_batch or threads not a positive int (n_seq_max ≤ 64).
        OSError: llama.cpp cannot load the file or create the context.
    """

    generation_config = None

    def __init__(self, path, n_ctx: int = DEFAULT_N_CTX, n_seq_max: int = DEFAULT_N_SEQ_MAX,
                 threads: int | None = None, n_batch: int = DEFAULT_N_BATCH, name: str | None = None,
                 extra_buffers: bool | None = None):
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"path={str(path)!r}: no such GGUF file")
        for arg, value, top in (("n_ctx", n_ctx, None), ("n_seq_max", n_seq_max, 64),
                                ("n_batch", n_batch, None), ("threads", threads or 1, None)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (top and value > top):
                raise ValueError(f"{arg} must be an integer in [1, {top or 'inf'}], got {value!r}")
        lib = _lib()
        self._lib = lib
        self.path, self.name = path, name or path.name
        self.n_ctx, self.n_seq_max, self.n_batch = n_ctx, n_seq_max, n_batch
        self.threads = threads or os.cpu_count() or 1
        self.extra_buffers = default_extra_buffers() if extra_buffers is None else bool(extra_buffers)
        self.build = build_description(self.extra_buffers)
        mparams = lib.llama_model_default_params()
        mparams.use_extra_bufts = self.extra_buffers
        self._model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise OSError(f"path={str(path)!r}: llama.cpp cannot load this GGUF file")
        cparams = lib.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = n_ctx, n_batch, n_batch
        cparams.n_seq_max = n_seq_max
        cparams.n_threads = cparams.n_threads_batch = self.threads
        cparams.kv_unified = True
        cparams.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lib.llama_model_free(self._model)
            self._model = None
            raise OSError(f"path={str(path)!r}: llama.cpp cannot create a context "
                          f"(n_ctx={n_ctx}, n_seq_max={n_seq_max})")
        self._mem = lib.llama_get_memory(self._ctx)
        self._vocab = lib.llama_model_get_vocab(self._model)
        self.V = int(lib.llama_vocab_n_tokens(self._vocab))
        self._batch = lib.llama_batch_init(n_batch, 0, n_seq_max)
        eos = int(lib.llama_vocab_eos(self._vocab))
        self.config = SimpleNamespace(eos_token_id=eos if eos >= 0 else None, vocab_size=self.V)

    # -- the cache -------------------------------------------------------------------------
    def clear(self) -> None:
        """Empty the cache (every sequence)."""
        self._lib.llama_memory_clear(self._mem, True)

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        """Drop sequence ``seq`` (−1: every sequence) from the cells at positions [p0, p1)
        (−1: open end); a cell no sequence holds any more is freed."""
        if not self._lib.llama_memory_seq_rm(self._mem, seq, p0, p1):
            raise RuntimeError(f"{self.name}: llama.cpp could not cut sequence {seq} at [{p0}, {p1})")

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Let sequence ``dst`` see the cells of ``src`` at positions [p0, p1) (unified cache:
        no data is copied)."""
        self._lib.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def seq_keep(self, seq: int) -> None:
        """Drop every cell that sequence ``seq`` does not hold, and every other id from the
        cells it does."""
        self._lib.llama_memory_seq_keep(self._mem, seq)

    def seq_pos_max(self, seq: int) -> int:
        """The last position sequence ``seq`` holds (−1 when empty)."""
        return int(self._lib.llama_memory_seq_pos_max(self._mem, seq))

    # -- forwards --------------------------------------------------------------------------
    def decode(self, feed: Feed) -> torch.Tensor:
        """Feed ``feed`` into the cache and return the logits asked for.

        Returns:
            float32 [len(feed.logits), V], a copy (llama.cpp reuses its buffer), row j for
            token ``feed.logits[j]``.
        Raises:
            ValueError: more sequences than ``n_seq_max``, a token id outside [0, V), or
                more tokens than the cache has free cells (llama.cpp's status 1).
            RuntimeError: llama.cpp reports another failure.
        """
        n = len(feed.tokens)
        want = list(feed.logits)
        out = []
        for start in range(0, n, self.n_batch):
            stop = min(n, start + self.n_batch)
            here = [i for i in want if start <= i < stop]
            self._fill(feed, start, stop, set(here))
            status = self._lib.llama_decode(self._ctx, self._batch)
            if status == 1:
                raise ValueError(f"{self.name}: the cache has no room for {stop - start} more "
                                 f"tokens (n_ctx={self.n_ctx}); use a shorter prompt or fewer "
                                 "new tokens")
            if status != 0:
                raise RuntimeError(f"{self.name}: llama_decode failed with status {status}")
            if here:
                ptr = self._lib.llama_get_logits(self._ctx)
                rows = np.ctypeslib.as_array(ptr, shape=(len(here), self.V))
                out.append(torch.from_numpy(rows.copy()))
        if not out:
            return torch.empty(0, self.V, dtype=torch.float32)
        return out[0] if len(out) == 1 else torch.cat(out)

    def _fill(self, feed: Feed, start: int, stop: int, logits: set) -> None:
        b = self._batch
        for j, i in enumerate(range(start, stop)):
            token = int(feed.tokens[i])
            if not 0 <= token < self.V:
                raise ValueError(f"{self.name}: token id {token} outside [0, {self.V})")
            seqs = feed.seqs[i]
            if not seqs or max(seqs) >= self.n_seq_max or min(seqs) < 0:
                raise ValueError(f"{self.name}: sequence ids {tuple(seqs)} outside "
                                 f"[0, n_seq_max={self.n_seq_max})")
            b.token[j] = token
            b.pos[j] = int(feed.positions[i])
            b.n_seq_id[j] = len(seqs)
            for s, seq in enumerate(seqs):
                b.seq_id[j][s] = int(seq)
            b.logits[j] = 1 if i in logits else 0
        b.n_tokens = stop - start

    def forward_last(self, tokens, start: int, seq: int = 0) -> torch.Tensor:
        """Feed ``tokens`` at positions ``start``… to sequence ``seq``; float32 [V] logits
        of the last."""
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        return self.decode(Feed(tuple(tokens), tuple(range(start, start + n)), ((seq,),) * n,
                                (n - 1,)))[0]

    # -- the vocabulary --------------------------------------------------------------------
    def vocabulary(self) -> list[bytes]:
        """Every token's text, id order (V entries)."""
        get, vocab = self._lib.llama_vocab_get_text, self._vocab
        return [get(vocab, i) or b"" for i in range(self.V)]

    def special_ids(self) -> dict[str, int]:
        """llama.cpp's eos / bos / eot ids (−1: none)."""
        lib, v = self._lib, self._vocab
        return {"eos": int(lib.llama_vocab_eos(v)), "bos": int(lib.llama_vocab_bos(v)),
                "eot": int(lib.llama_vocab_eot(v))}

    def close(self) -> None:
        """Free the context and the model (also on garbage collection)."""
        lib = getattr(self, "_lib", None)
        if lib is None:
            return
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            lib.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lib.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"LlamaCppModel({self.name}, V={self.V}, n_ctx={self.n_ctx}, threads={self.threads})"
