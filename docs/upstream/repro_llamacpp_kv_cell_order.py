"""Reproducer: llama.cpp gives wrong logits once a sequence's KV cells are out of position order.

Standalone (needs only ``llama-cpp-python`` and numpy; no part of spectr-gbv):

    python repro_llamacpp_kv_cell_order.py MODEL.gguf [MODEL2.gguf ...]

For each GGUF file, with a unified KV cache (``kv_unified = true``, 2 sequences):

1. decode 8 prompt tokens on sequence 0 (cells 0-7, positions 0-7);
2. ``llama_memory_seq_cp(mem, 0, 1, -1, -1)``; decode token A at position 8 on sequence 1 (cell 8);
3. decode token B at position 8 on sequence 0 (cell 9); ``llama_memory_seq_rm(mem, 1, -1, -1)``
   (frees cell 8);
4. decode token C at position 9 on sequence 0: it lands in cell 8, below cell 9 (position 8).

The logits of step 4 are compared with a control run of the very same decodes (same batches,
same sizes, same kernels) in which sequence 1 is removed only after step 4: C then lands in cell
10 and sequence 0's cells stay in position order.  The two runs feed sequence 0 the same tokens
at the same positions, and sequence 1's cell is masked out of sequence 0's attention in both, so
they must give the same logits.  A third run decodes prompt, B, C on sequence 0 alone, in the
same batch sizes, with no sequence 1 at all.

Prints, per model, the largest absolute difference of the softmax rows (probability) of the
out-of-order run and of the control, each against the third run; exits 1 when the out-of-order
run differs by more than 1e-3 while the control agrees within 1e-5 (the defect reproduced), 0
otherwise.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np


def _softmax(x):
    z = np.asarray(x, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


class Ctx:
    """A llama.cpp context on one GGUF: unified cache, 2 sequences, 1 thread, quiet."""

    def __init__(self, lib, model, n_ctx=64):
        p = lib.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx, n_ctx, n_ctx, 2
        p.n_threads = p.n_threads_batch = 1
        p.kv_unified = True
        self.lib, self.ctx = lib, lib.llama_init_from_model(model, p)
        if not self.ctx:
            raise OSError("llama_init_from_model failed")
        self.mem = lib.llama_get_memory(self.ctx)
        self.V = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
        self.batch = lib.llama_batch_init(n_ctx, 0, 2)

    def decode(self, tokens, pos0, seq):
        """Decode ``tokens`` at positions pos0… on sequence ``seq``; float32 logits of the last."""
        b = self.batch
        for j, t in enumerate(tokens):
            b.token[j], b.pos[j], b.n_seq_id[j] = int(t), pos0 + j, 1
            b.seq_id[j][0] = seq
            b.logits[j] = 1 if j == len(tokens) - 1 else 0
        b.n_tokens = len(tokens)
        if self.lib.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        ptr = self.lib.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.V,)).copy()

    def free(self):
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)


def run(path: str) -> tuple[float, float]:
    import llama_cpp as lib

    global _quiet
    lib.llama_backend_init()

    @lib.llama_log_callback
    def quiet(level, text, user_data):  # errors only (GGML_LOG_LEVEL_ERROR = 4)
        if level == 4:
            sys.stderr.write(text.decode(errors="replace"))
    _quiet = quiet  # keep the callback alive
    lib.llama_log_set(_quiet, ctypes.c_void_p(0))
    mp = lib.llama_model_default_params()
    # no extra buffer types: llama.cpp 0.3.36's AMX weight buffer crashes multi-token batches on
    # some AMX machines (SIGSEGV or SIGILL; llamacpp_amx_segfault.md beside this file); the defect
    # shown here does not depend on it
    mp.use_extra_bufts = False
    model = lib.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise OSError(f"cannot load {path}")
    vocab = lib.llama_model_get_vocab(model)
    text = b"The cat sat on the mat. The dog sat on the rug."
    buf = (lib.llama_token * 64)()
    n = lib.llama_tokenize(vocab, text, len(text), buf, 64, False, False)
    prompt = list(buf[:8])
    assert n >= 11, "prompt too short"
    A, B, C = int(buf[8]), int(buf[9]), int(buf[10])

    def scenario(remove_before_c: bool | None) -> np.ndarray:
        c = Ctx(lib, model)
        try:
            c.decode(prompt, 0, 0)                       # cells 0-7, positions 0-7
            if remove_before_c is not None:
                lib.llama_memory_seq_cp(c.mem, 0, 1, -1, -1)
                c.decode([A], 8, 1)                      # sequence 1: cell 8, position 8
            c.decode([B], 8, 0)                          # sequence 0: cell 9 (cell 8 alone), position 8
            if remove_before_c:
                lib.llama_memory_seq_rm(c.mem, 1, -1, -1)  # frees cell 8
            return c.decode([C], 9, 0)                   # cell 8 (freed) or cell 10, position 9
        finally:
            c.free()

    p_ref = _softmax(scenario(None))                     # sequence 0 alone, same batch sizes
    bad = float(np.abs(_softmax(scenario(True)) - p_ref).max())
    good = float(np.abs(_softmax(scenario(False)) - p_ref).max())
    lib.llama_model_free(model)
    return bad, good


def main(argv) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[0])
        print("usage: python repro_llamacpp_kv_cell_order.py MODEL.gguf [MODEL2.gguf ...]")
        return 2
    import llama_cpp

    print(f"llama-cpp-python {llama_cpp.__version__}")
    reproduced = False
    for path in argv:
        bad, good = run(path)
        hit = bad > 1e-3 and good < 1e-5
        reproduced |= hit
        print(f"{path}: max |softmax diff| cells out of order {bad:.3g}, cells in order {good:.3g}"
              f" -> {'REPRODUCED' if hit else 'not reproduced'}")
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
