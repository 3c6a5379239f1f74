"""Timing on a shared machine: medians of interleaved rounds (``timed_interleaved``: a transient
load slows one round of every candidate, not every repeat of one), and whether the machine was
busy while timing (the repeats' spread; other processes' cores from /proc/stat).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

TIMING_REPEATS = 5
SLOW_CALL_S = 1.0
# the machine counts as busy during a timing when the repeats spread by more than this
# (median over the functions of (max − min) / median) or when the other processes used more
# cores than this process left free, by more than BUSY_SLACK_CORES (Linux /proc/stat)
NOISY_SPREAD = 0.25
BUSY_SLACK_CORES = 0.5
# a generation whose decode rate misses the prediction by more than this (relative, either
# direction) marks the cached costs stale (``tuning.recheck``)
RATE_TOLERANCE = 0.25


def machine_busy_seconds() -> float:
    """CPU seconds all processes have spent busy since boot, summed over cores (Linux
    /proc/stat: user + nice + system + irq + softirq + steal); NaN where unreadable."""
    import os

    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / ticks
    except (OSError, ValueError, IndexError):
        return float("nan")


@dataclass
class TimingQuality:
    """How quiet the machine was while ``timed_interleaved`` ran.

    Attributes:
        spread: median over the timed functions of (max − min) / median of their repeats
            (0 on a perfectly steady machine; a load that comes and goes widens it).
        other_cores: cores' worth of CPU time the OTHER processes used during the timing
            (machine busy seconds − this process's CPU seconds, over wall seconds); NaN where
            the machine's counters cannot be read.
        free_cores: cores not used by this process's torch threads (cores − threads).
        calls: timed calls (warm-ups excluded).
    A timing is quiet when spread ≤ ``NOISY_SPREAD`` and the other processes did not need more
    than the free cores (+ ``BUSY_SLACK_CORES``): otherwise some held a core this process wanted.
    """

    spread: float
    other_cores: float
    free_cores: float
    calls: int

    @property
    def quiet(self) -> bool:
        """spread ≤ ``NOISY_SPREAD`` and not other_cores > free_cores + ``BUSY_SLACK_CORES``."""
        return self.spread <= NOISY_SPREAD and not self.other_cores > self.free_cores + BUSY_SLACK_CORES

    def merged(self, other: "TimingQuality") -> "TimingQuality":
        """The worse of two timings' indicators (calls added)."""
        load = max((x for x in (self.other_cores, other.other_cores) if x == x), default=float("nan"))
        return TimingQuality(max(self.spread, other.spread), load, min(self.free_cores, other.free_cores),
                             self.calls + other.calls)

    def to_json(self) -> dict:
        return {"spread": self.spread, "other_cores": self.other_cores if self.other_cores == self.other_cores else None,
                "free_cores": self.free_cores, "calls": self.calls, "quiet": self.quiet}

    def line(self) -> str:
        """One line for the user when the machine was not quiet."""
        load = ("" if self.other_cores != self.other_cores else
                f", other processes used {self.other_cores:.1f} cores with {self.free_cores:g} free")
        return (f"auto-configuration: the machine was busy while timing (repeats spread "
                f"{100 * self.spread:.0f} %{load}); the costs are kept, and every generation's decode "
                f"rate is checked against them (a miss by more than {100 * RATE_TOLERANCE:.0f} % times them again)")


def timed_interleaved(fns, repeats: int = TIMING_REPEATS, device=None, threads: int | None = None,
                      clock=time.perf_counter, cpu_clock=time.process_time,
                      machine_clock=machine_busy_seconds, cores: int | None = None
                      ) -> tuple[list[float], TimingQuality]:
    """Median seconds of each function of ``fns``, the repeats interleaved: after one warm-up
    call of each (the first call of a shape builds kernels and allocates), ``repeats`` rounds
    each call every function once, so a load that comes and goes slows one round of every
    function rather than every repeat of one, and the median drops it.

    A function whose warm-up is slower than ``SLOW_CALL_S`` is timed once more, outside the
    rounds (a host-planned verifier such as mdbv's takes seconds per call at a large vocabulary).
    On a CUDA ``device`` each call is synchronised before the clock is read.

    Args:
        fns: callables with no arguments.
        repeats: rounds (≥ 1).
        threads: torch threads (default the current setting); cores: the machine's (default
            ``os.cpu_count()``): free cores = cores − threads.
        clock, cpu_clock, machine_clock: wall seconds, this process's CPU seconds, and every
            process's busy CPU seconds (``machine_busy_seconds``); tests pass fakes.
    Returns:
        ([median seconds per function], TimingQuality of the rounds).
    """
    import os

    cuda = device is not None and torch.device(device).type == "cuda"

    def once(fn) -> float:
        start = clock()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        return clock() - start

    fns = list(fns)
    warm = [once(fn) for fn in fns]
    slow = [w > SLOW_CALL_S for w in warm]
    samples = [[] for _ in fns]
    wall0, cpu0, busy0 = clock(), cpu_clock(), machine_clock()
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            if not slow[i]:
                samples[i].append(once(fn))
    wall, cpu, busy = clock() - wall0, cpu_clock() - cpu0, machine_clock() - busy0
    out = [once(fn) if slow[i] else statistics.median(samples[i]) for i, fn in enumerate(fns)]
    spreads = [(max(x) - min(x)) / statistics.median(x) for x in samples if len(x) > 1 and statistics.median(x) > 0]
    threads = threads or torch.get_num_threads()
    cores = cores or os.cpu_count() or threads
    others = max(busy - cpu, 0.0) / wall if wall > 0 and busy == busy else float("nan")
    return out, TimingQuality(statistics.median(spreads) if spreads else 0.0, others,
                              float(max(cores - threads, 0)), sum(len(x) for x in samples))


def median_seconds(fn, repeats: int = TIMING_REPEATS, device=None) -> float:
    """Median seconds of ``fn()`` (``timed_interleaved`` of one function)."""
    return timed_interleaved([fn], repeats, device)[0][0]
