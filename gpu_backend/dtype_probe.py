"""The weights' dtype from measured cost: bfloat16 only where this machine computes it faster.

The CPU flags (machine.native_bf16) say whether bfloat16 *can* be native; what pays is measured.
A probe times the linear layers of one decoder layer of the embedded target's shape (Qwen2.5-
Coder 1.5B: hidden 1536, MLP 8960, grouped K/V of 256; about 46 M weights, over 90 % of a
layer's multiply-adds at these lengths) on random weights, in bfloat16 and float32, at three
input lengths: a decode step (1 token), a verify block (9 tokens: K = 2 drafts of L = 4 plus
the root) and a prompt's prefill (128 tokens).  The weights' values do not change the cost.

Decision: bfloat16 iff it is no slower than float32 at the verify and prefill lengths, where an
emulated bfloat16 shows (compute-bound: on an AVX2-only CPU a 10-token target forward cost 4.8
decode steps in bfloat16 against 3.5 in float32, and the prefill 26.9 s against 7.4 s); float32
otherwise.  The measurement is cached per machine (``machine.fingerprint``) in the
auto-configuration cache, so a machine probes once (about a second here).

Measured on this 2-core AMD EPYC (AVX512-BF16, no AMX), 2 threads: bfloat16 ÷ float32 = 0.52 at
1 token, 0.28 at 16, 0.25 at 128 tokens.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

import torch

# (in, out) of the linear layers of one Qwen2.5-Coder-1.5B decoder layer: q, k, v, o, gate, up, down
LAYER_SHAPES = ((1536, 1536), (1536, 256), (1536, 256), (1536, 1536), (1536, 8960), (1536, 8960), (8960, 1536))
LENGTHS = (1, 9, 128)  # decode step, verify block, prefill
DECIDING = (9, 128)
DTYPES = ("bfloat16", "float32")
REPEATS = 5


@dataclass
class DtypeProbe:
    """Seconds per pass through the probe's linear layers, per dtype and input length.

    Attributes:
        seconds: {dtype: {tokens: seconds}} (medians of ``REPEATS`` passes after one warm-up).
        cached: the measurement came from the cache.
    """

    seconds: dict
    cached: bool = False

    @property
    def dtype(self) -> str:
        """"bfloat16" iff it is no slower than float32 at every length in ``DECIDING``."""
        s = self.seconds
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
    def from_json(cls, data: dict, cached: bool = True) -> "DtypeProbe":
        seconds = {d: {int(n): float(v) for n, v in data[d].items()} for d in DTYPES}
        for d in DTYPES:
            missing = [n for n in LENGTHS if n not in seconds[d]]
            if missing or any(not (v > 0) for v in seconds[d].values()):
                raise ValueError(f"dtype probe entry for {d}: lengths {missing} missing or non-positive times")
        return cls(seconds, cached)


@torch.inference_mode()
def measure(shapes=LAYER_SHAPES, lengths=LENGTHS, repeats: int = REPEATS, seed: int = 0) -> DtypeProbe:
    """Time the linear layers ``shapes`` ((in, out) pairs) at each input length in each dtype.

    Args:
        shapes: (in_features, out_features) of the layers, applied one after the other to an
            input of matching width (random; the values do not change the cost).
        lengths: input lengths (tokens), ints ≥ 1.
        repeats: timed passes per (dtype, length), ≥ 1; the median is kept.
    Returns:
        DtypeProbe with seconds per pass.
    Raises:
        ValueError: empty ``shapes``, non-positive sizes, lengths or repeats.
    """
    if not shapes or any(int(i) < 1 or int(o) < 1 for i, o in shapes):
        raise ValueError(f"shapes must be non-empty (in, out) pairs of positive sizes, got {shapes!r}")
    if not lengths or any(int(n) < 1 for n in lengths):
        raise ValueError(f"lengths must be positive token counts, got {lengths!r}")
    if int(repeats) < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats!r}")
    g = torch.Generator().manual_seed(seed)
    master = [torch.randn(o, i, generator=g) * i ** -0.5 for i, o in shapes]
    seconds = {}
    for name in DTYPES:
        dtype = getattr(torch, name)
        weights = [w.to(dtype) for w in master]
        per = {}
        for n in lengths:
            inputs = {i: torch.randn(int(n), i, generator=g).to(dtype) for i in {i for i, _ in shapes}}

            def one_pass():
                for (i, _), w in zip(shapes, weights):
                    torch.nn.functional.linear(inputs[i], w)

            one_pass()
            times = []
            for _ in range(int(repeats)):
                start = time.perf_counter()
                one_pass()
                times.append(time.perf_counter() - start)
            per[int(n)] = statistics.median(times)
        seconds[name] = per
        del weights
    return DtypeProbe(seconds)


def probe_dtype(threads: int | None = None, refresh: bool = False, log=None) -> DtypeProbe:
    """The measured dtype choice for this machine, from the auto-configuration cache when there.

    Args:
        threads: torch threads the measurement is keyed by (None: ``torch.get_num_threads()``).
        refresh: measure again even when cached.
        log: callable for a line when the cache cannot be written (default: stderr).
    Returns:
        DtypeProbe (``.dtype`` is the choice).
    """
    import sys

    from . import autoconfig
    from .machine import fingerprint

    log = log or (lambda line: print(line, file=sys.stderr))
    threads = torch.get_num_threads() if threads is None else int(threads)
    key = json.dumps(["dtype_probe", fingerprint(threads), LAYER_SHAPES, LENGTHS])
    data = autoconfig._read_cache()
    entries = data.setdefault("entries", {})
    if not refresh and key in entries:
        try:
            return DtypeProbe.from_json(entries[key])
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a damaged entry is measured again
    probe = measure()
    entries[key] = probe.to_json()
    autoconfig._write_cache(data, log)
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
        from .machine import auto_dtype

        return auto_dtype(device), None
    probe = probe_dtype(refresh=refresh, log=log)
    return probe.dtype, probe
