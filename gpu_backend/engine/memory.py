"""Memory: the peak resident memory of this process (Linux ``VmHWM``), resettable between runs;
and the estimates refused before a run (the memory available, one iteration's probability rows)."""

from __future__ import annotations

import resource


def peak_rss_bytes() -> int:
    """Peak resident set size since the process started or since the last ``reset_peak_rss``.

    Returns:
        bytes (int).  Reads ``VmHWM`` from /proc/self/status; elsewhere falls back to
        ``getrusage`` (never reset).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_rss() -> bool:
    """Reset the peak to the current RSS (Linux ≥ 4.0: write 5 to /proc/self/clear_refs).

    Returns:
        True when reset, False where unsupported (the peak then stays process-wide).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# -- estimates made before any model is loaded (no torch) -----------------------------------------

def available_memory_bytes() -> int | None:
    """Memory available to a new allocation now (psutil, /proc/meminfo or sysconf), or None."""
    import os

    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unusable: fall back
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(n: float) -> str:
    """``n`` bytes readable: ``512 B``, ``1.5 GB`` (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000.0
    return f"{n:.3g} PB"


def engine_row_bytes(K: int, L: int, V: int) -> int:
    """Bytes of one iteration's float32 probability rows in the engine: K·L draft rows and
    K·(L+1) target rows of V entries."""
    return 4 * V * K * (2 * L + 1)


def check_engine_memory(K: int, L: int, V: int, known_vocab: bool, flags: str) -> None:
    """Refuse K and L whose probability rows alone cannot fit in the available memory.

    Args:
        flags: the arguments named in the refusal (``--K/--L`` on the command line).
    Raises:
        ValueError: naming ``flags`` and stating the estimate.
    """
    need = engine_row_bytes(K, L, V)
    avail = available_memory_bytes()
    if avail is not None and need > avail:
        v = f"V = {V:,}" + ("" if known_vocab else ", assumed")
        raise ValueError(f"{flags}: one iteration's K·(L+1) target and K·L draft probability rows "
                         f"need {human_bytes(need)} (K = {K:,}, L = {L:,}, {v}, float32), more than "
                         f"the {human_bytes(avail)} of memory available")
