"""glibc's allocator told to keep freed memory for reuse: ``keep_freed_memory``.

A chunk's numpy work (``topk_laws.request_law``, ``record_arrays``) allocates and frees hundreds
of temporaries of a few MB each ([N, k] float64 arrays, N ~ 16,000 positions a chunk).  By
default glibc serves blocks that large from fresh ``mmap``s (its threshold grows only up to the
largest block freed so far) and gives the top of the heap back to the system on a free, so the
next temporary page-faults its pages in again: on a 2-core KVM guest that was ~1/6 of a top-20
chunk's CPU time (benchmarks/CERTIFY_LOG.md).  Fixed thresholds (blocks below 32 MiB from the
heap; the heap trimmed only past 256 MiB free) keep the memory for the next temporary.  Nothing
computed changes; a process's resident memory stays near its peak instead of shrinking between
chunks.  Elsewhere (no glibc: macOS, Windows, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Set this process's glibc malloc thresholds (module doc); True when both were set.  Safe to
    call more than once; the setting lasts for the process."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library with mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
