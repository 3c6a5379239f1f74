"""Peak resident memory of this process (Linux ``VmHWM``), resettable between runs."""

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
