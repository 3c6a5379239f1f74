"""What the machine computes natively: the CPU flags that decide bfloat16 speed (and, recorded
beside benchmark numbers, the int8 ones: VNNI, AMX-INT8).

bfloat16 pays only where the hardware computes it: on a CPU without AVX512-BF16 or AMX-BF16,
torch emulates it, several times slower than float32 (measured in
benchmarks/ENGINE_CERTIFICATE.md).  ``auto_dtype`` picks bfloat16 only where
the flags say it is native (CUDA: capability ≥ 8); on a CPU, ``--dtype auto`` goes by the
measured cost instead (dtype_probe.py), and every benchmark records these flags beside its
numbers.
"""

from __future__ import annotations

import os
import platform

# the flags that change what pays: bf16 arithmetic, AMX tiles, int8 dot products, vector width
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpuinfo() -> str:
    """Linux /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags.

    Args:
        cpuinfo: text in the format of Linux ``/proc/cpuinfo`` (None: read that file).
    Returns:
        the words of the first ``flags`` line (empty when there is none, e.g. not Linux).
    """
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name (``platform.processor()`` where /proc/cpuinfo has none)."""
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def native_bf16(device: str = "cpu", flags: frozenset[str] | None = None) -> bool:
    """Whether ``device`` computes bfloat16 natively.

    Args:
        device: "cpu" or a CUDA device ("cuda", "cuda:0").
        flags: CPU flags (None: ``cpu_flags()``); CPU only.
    Returns:
        CPU: True iff the flags include AVX512-BF16 or AMX-BF16.  CUDA: torch's answer
        without emulation (compute capability ≥ 8.0).
    """
    if str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: CUDA is not available in this torch build or machine")
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in NATIVE_BF16_FLAGS)


def auto_dtype(device: str = "cpu", flags: frozenset[str] | None = None) -> str:
    """"bfloat16" where the device computes it natively, else "float32" (see the module)."""
    return "bfloat16" if native_bf16(device, flags) else "float32"


def describe_flags(flags: frozenset[str] | None = None) -> str:
    """One line, e.g. ``CPU flags: avx2 yes, avx512f yes, avx512_bf16 yes, amx_bf16 no, ...``."""
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "CPU flags unknown"
    return "CPU flags: " + ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in REPORTED_FLAGS)


def fingerprint(threads: int) -> dict:
    """What a measured cost depends on besides the models: CPU model, the flags that matter,
    cores, torch threads, torch version (a key of ``autoconfig``'s cache)."""
    import torch

    flags = cpu_flags()
    return {"cpu": cpu_model(), "flags": sorted(f for f in REPORTED_FLAGS if f in flags),
            "cores": os.cpu_count(), "threads": int(threads), "torch": torch.__version__}
