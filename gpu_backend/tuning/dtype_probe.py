"""The weights' dtype from measured cost: bfloat16 only where this machine computes it faster.

The CPU flags (machine.native_bf16) say whether bfloat16 *can* be native; what pays is measured.
A probe times the linear layers of one decoder layer of the embedded target's shape (Qwen2.5-
Coder 1.5B: hidden 1536, MLP 8960, grouped K/V of 256; about 46 M weights, over 90 % of a
layer's multiply-adds at these lengths) on random weights, in bfloat16 and float32, at three
input lengths: a decode step (1 token), a verify block (9 tokens: K = 2 drafts of L = 4 plus
the root) and a prompt's prefill (128 tokens).  The weights' values do not change the cost.

Decision: bfloat16 iff it is no slower than float32 at all three lengths: an emulated bfloat16
shows at the verify and prefill lengths (compute-bound), and a 1-token product can take a slow
bfloat16 path of its own; float32 otherwise.  The measurement is cached per machine
(``machine.fingerprint``) in the auto-configuration cache, so a machine probes once.  Ratios
measured on the project's machines: benchmarks/MEASUREMENTS.md, "gpu_backend/tuning/dtype_probe.py".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import torch

from spectr_gbv.reference.validation import check_positive_int

from spectr_gbv.gpu_backend.tuning.timing import median_seconds

# (in, out) of the linear layers of one Qwen2.5-Coder-1.5B decoder layer: q, k, v, o, gate, up, down
LAYER_SHAPES = ((1536, 1536), (1536, 256), (1536, 256), (1536, 1536), (1536, 8960), (1536, 8960), (8960, 1536))
LENGTHS = (1, 9, 128)  # decode step, verify block, prefill
DECIDING = LENGTHS
DTYPES = ("bfloat16", "float32")
REPEATS = 5
MAX_WEIGHTS = 1 << 28  # per layer (1 GB in float32): a probe, not a model
MAX_TOKENS = 1 << 16


@dataclass
class DtypeProbe:
    """Seconds per pass through the probe's linear layers, per dtype and input length.

    Attributes:
        seconds: {dtype: {tokens: seconds}} (medians of ``REPEATS`` passes after one warm-up,
            as ``measure`` times them).
        cached: the measurement came from the cache.
    """

    seconds: dict
    cached: bool = False

    @property
    def dtype(self) -> str:
        """"bfloat16" iff it is no slower than float32 at every length in ``DECIDING``.

        Raises:
            ValueError: the probe lacks a length of ``DECIDING`` (a custom ``measure``).
        """
        s = self.seconds
        missing = [n for n in DECIDING if any(n not in s.get(d, {}) for d in DTYPES)]
        if missing:
            raise ValueError(f"this probe has no times at lengths {missing}, which the dtype decision needs")
        return "bfloat16" if all(s["bfloat16"][n] <= s["float32"][n] for n in DECIDING) else "float32"

    def summary(self) -> str:
        """One line: the choice and the measured ratios."""
        ratios = ", ".join(f"{n} tokens {self.seconds['bfloat16'][n] / self.seconds['float32'][n]:.2f}"
                           for n in LENGTHS)
        how = "cached" if self.cached else "measured"
        return (f"dtype auto: {self.dtype} ({how}: bfloat16 ÷ float32 time of a decoder layer's linear "
                f"layers at {ratios})")

    def to_json(self) -> dict:
        return {d: {str(n): v for n, v in per.items()} for d, per in self.seconds.items()}

    @classmethod
    def from_json(cls, data, cached: bool = True) -> "DtypeProbe":
        """The probe from ``to_json``'s form.

        Raises:
            ValueError: anything else: a dtype or length missing, keys that are not the lengths'
                decimal forms, times that are not finite positive numbers.
        """
        if not isinstance(data, dict) or any(not isinstance(data.get(d), dict) for d in DTYPES):
            raise ValueError(f"dtype probe entry: expected {{dtype: {{length: seconds}}}} for {DTYPES}")
        seconds = {}
        for d in DTYPES:
            per = {}
            for key, value in data[d].items():
                if not (isinstance(key, str) and key.isdigit() and str(int(key)) == key):
                    raise ValueError(f"dtype probe entry for {d}: length key {key!r} is not a decimal integer")
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"dtype probe entry for {d}: time {value!r} is not a number")
                try:
                    v = float(value)
                except OverflowError:
                    v = math.inf
                if not (math.isfinite(v) and v > 0):
                    raise ValueError(f"dtype probe entry for {d}: time {value!r} is not finite and positive")
                per[int(key)] = v
            missing = [n for n in LENGTHS if n not in per]
            if missing:
                raise ValueError(f"dtype probe entry for {d}: lengths {missing} missing")
            seconds[d] = per
        return cls(seconds, cached)


@torch.inference_mode()
def measure(shapes=LAYER_SHAPES, lengths=LENGTHS, repeats: int = REPEATS, seed: int = 0) -> DtypeProbe:
    """Time the linear layers ``shapes`` ((in, out) pairs) at each input length in each dtype.

    Args:
        shapes: (in_features, out_features) of the layers, applied one after the other to an
            input of matching width (random; the values do not change the cost).
        lengths: input lengths (tokens), ints ≥ 1.
        repeats: timed passes per (dtype, length), an integer ≥ 1; the median after one warm-up
            is kept (timing.median_seconds: one more pass instead where the warm-up took over a second).
    Returns:
        DtypeProbe with seconds per pass.
    Raises:
        ValueError: naming the argument: ``shapes`` not (in, out) pairs of positive integers or a
            layer above MAX_WEIGHTS weights; ``lengths`` not integers in [1, MAX_TOKENS];
            ``repeats`` not an integer ≥ 1.
    """
    def count(x) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))

    shapes = list(shapes) if not isinstance(shapes, (str, bytes)) and hasattr(shapes, "__iter__") else None
    if (not shapes or any(not (isinstance(s, (tuple, list)) and len(s) == 2 and all(count(x) and x >= 1 for x in s))
                          for s in shapes)):
        raise ValueError("shapes must be a non-empty sequence of (in, out) pairs of integers >= 1")
    if any(int(i) * int(o) > MAX_WEIGHTS for i, o in shapes):
        raise ValueError(f"shapes: a layer above {MAX_WEIGHTS} weights is not a probe")
    shapes = [(int(i), int(o)) for i, o in shapes]
    lengths = list(lengths) if not isinstance(lengths, (str, bytes)) and hasattr(lengths, "__iter__") else None
    if not lengths or any(not (count(n) and 1 <= n <= MAX_TOKENS) for n in lengths):
        raise ValueError(f"lengths must be a non-empty sequence of integers in [1, {MAX_TOKENS}]")
    lengths = [int(n) for n in lengths]
    if isinstance(repeats, float):
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    repeats = check_positive_int(repeats, "repeats")
    g = torch.Generator().manual_seed(seed)
    master = [torch.randn(o, i, generator=g) * i ** -0.5 for i, o in shapes]
    seconds = {}
    for name in DTYPES:
        dtype = getattr(torch, name)
        weights = [w.to(dtype) for w in master]
        per = {}
        for n in lengths:
            inputs = {i: torch.randn(n, i, generator=g).to(dtype) for i in {i for i, _ in shapes}}

            def one_pass():
                for (i, _), w in zip(shapes, weights):
                    torch.nn.functional.linear(inputs[i], w)

            per[n] = median_seconds(one_pass, repeats)  # the median after one warm-up
        seconds[name] = per
        del weights
    return DtypeProbe(seconds)


def probe_dtype(threads: int | None = None, refresh: bool = False, log=None) -> DtypeProbe:
    """The measured dtype choice for this machine, from the auto-configuration cache when there.

    Args:
        threads: torch threads to measure with and key the cache by, an integer ≥ 1 (None:
            ``torch.get_num_threads()``); the caller's setting is restored after.
        refresh: measure again even when cached.
        log: callable for a line when the cache cannot be written (default: stderr).
    Returns:
        DtypeProbe (``.dtype`` is the choice).
    """
    import sys

    from spectr_gbv.gpu_backend.tuning import cache
    from spectr_gbv.gpu_backend.tuning.machine import fingerprint

    log = log or (lambda line: print(line, file=sys.stderr))
    threads = torch.get_num_threads() if threads is None else check_positive_int(threads, "threads")
    key = json.dumps(["dtype_probe", fingerprint(threads), LAYER_SHAPES, LENGTHS])
    data = cache.read_cache()
    entries = data.setdefault("entries", {})
    if not refresh and key in entries:
        try:
            return DtypeProbe.from_json(entries[key])
        except ValueError:
            pass  # a damaged entry is measured again
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # measured with the threads it is filed under
    try:
        probe = measure()
    finally:
        torch.set_num_threads(before)
    entries[key] = probe.to_json()
    cache.write_cache(data, log)
    return probe


def resolve(name: str, device: str = "cpu", refresh: bool = False, log=None) -> tuple[str, DtypeProbe | None]:
    """``name`` itself, or for "auto" the measured choice (a CUDA device: bfloat16 iff native,
    ``machine.native_bf16``; no probe).

    Returns:
        (dtype name, the probe or None where none ran).
    """
    if name != "auto":
        return name, None
    if str(device).startswith("cuda"):
        from spectr_gbv.gpu_backend.tuning.machine import auto_dtype

        return auto_dtype(device), None
    probe = probe_dtype(refresh=refresh, log=log)
    return probe.dtype, probe
