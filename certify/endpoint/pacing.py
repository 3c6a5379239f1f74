"""How hard the certifier presses on a server: adaptive concurrency, ghost slots, a rate cap.

A certifier is a guest of the deployment it certifies.  ``Pacer`` decides when the next request
may start; every request of one ``client.Endpoint`` goes through it (``acquire`` before sending,
``release`` with the outcome after).  Terms:

- **limit** — the requests allowed in flight at once, between 1 and ``ceiling`` (the
  ``--concurrency`` asked).  It starts at 1 and doubles after each window of ``limit`` successes
  in a row (slow start) until the first overload or ``ceiling``; a healthy server reaches 8 in
  flight after 1 + 2 + 4 answers.
- **overload** — a request that timed out, or an answer HTTP 429 (too many requests), 503
  (unavailable) or 504 (gateway timeout).  Each halves the limit (at most once per
  ``cooldown_s``, so that one burst of C failures counts once), and a ``Retry-After`` header pauses
  every request until it has passed.
- **ghost** — a request that timed out is not cancelled on the server (an HTTP client cannot do
  that): the server may still be computing it.  Its slot stays taken for ``ghost_s`` more seconds,
  so a retry never stacks on a request the server may still hold without the limit counting it.
- **growth** — after the first overload, a window of ``limit`` successes in a row grows the limit
  by one only, back towards ``ceiling`` (additive increase, multiplicative decrease: TCP's
  congestion control, slow start included).  A success slower than ``slow_s`` (the client sets
  half the request timeout) counts as no success: the server is near the timeout already, so
  the limit holds instead of growing into the next timeout.
- **rate** — with ``max_rps``, request starts are spaced at least 1 / ``max_rps`` s apart.

``adaptive=False`` keeps the limit fixed at ``ceiling`` from the start and holds no ghost (the former behaviour,
kept for the comparison test: tests/certify/endpoint/test_pacing.py).  Thread-safe.
"""

from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass, field

OVERLOAD_STATUSES = (429, 503, 504)
MAX_PAUSE_S = 60.0


@dataclass
class PacerStats:
    """What the pacer did: ``lowest`` limit reached, ``cuts`` (halvings), ``timeouts``,
    ``overloads`` (429/503/504 answers), ``paused_s`` (seconds waited on Retry-After or the rate
    cap), ``changes``: (seconds since start, new limit, why) per change."""

    lowest: int
    cuts: int = 0
    timeouts: int = 0
    overloads: int = 0
    paused_s: float = 0.0
    changes: list = field(default_factory=list)


class Pacer:
    """Adaptive concurrency for one server (module doc).

    Args:
        ceiling: the most requests in flight (≥ 1; the limit starts here).
        adaptive: halve on overload and grow back on success (else a fixed limit).
        ghost_s: seconds a timed-out request's slot stays taken (≥ 0; usually the request timeout).
        max_rps: the most request starts per second (> 0), or None for no cap.
        cooldown_s: two halvings are at least this far apart (≥ 0).
        slow_s: a success slower than this does not count towards growth (None: every one does).
    Raises:
        ValueError: an argument out of range (named).
    """

    def __init__(self, ceiling: int, *, adaptive: bool = True, ghost_s: float = 0.0, max_rps: float | None = None,
                 cooldown_s: float = 1.0, slow_s: float | None = None):
        if int(ceiling) < 1:
            raise ValueError(f"ceiling (the concurrency) must be >= 1, got {ceiling!r}")
        if ghost_s < 0 or cooldown_s < 0:
            raise ValueError("ghost_s and cooldown_s must be >= 0")
        if max_rps is not None and not max_rps > 0:
            raise ValueError(f"max_rps must be > 0, got {max_rps!r}")
        self.ceiling = int(ceiling)
        self.limit = 1 if adaptive else self.ceiling
        self._threshold = self.ceiling  # slow start (doubling) below it, additive growth from it
        self.adaptive, self.ghost_s, self.max_rps, self.cooldown_s = bool(adaptive), float(ghost_s), max_rps, cooldown_s
        self.slow_s = slow_s
        self._clock = time.monotonic
        self._cond = threading.Condition()
        self._live = 0
        self._ghosts: list = []  # expiry times (a heap)
        self._streak = 0
        self._paused_until = 0.0
        self._next_start = 0.0
        self._last_cut = -float("inf")
        self._t0 = self._clock()
        self.stats = PacerStats(lowest=self.ceiling)

    @property
    def in_flight(self) -> int:
        """Live requests plus ghosts not yet expired."""
        with self._cond:
            self._expire(self._clock())
            return self._live + len(self._ghosts)

    def _expire(self, now: float) -> None:
        while self._ghosts and self._ghosts[0] <= now:
            heapq.heappop(self._ghosts)

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Wait for a slot (and for the pause and the rate cap); False when ``stop`` was set first."""
        with self._cond:
            while True:
                if stop is not None and stop.is_set():
                    return False
                now = self._clock()
                self._expire(now)
                wait = max(self._paused_until - now, 0.0)
                if self._live + len(self._ghosts) >= self.limit:
                    ghost_wait = (self._ghosts[0] - now) if self._ghosts else 0.5
                    wait = max(wait, min(ghost_wait, 0.5))
                elif self.max_rps is not None and self._next_start > now and wait == 0.0:
                    wait = self._next_start - now
                if wait <= 0.0:
                    self._live += 1
                    if self.max_rps is not None:
                        self._next_start = max(self._next_start, now) + 1.0 / self.max_rps
                    return True
                step = min(wait, 0.5)
                if self._paused_until > now or (self.max_rps is not None and self._next_start > now):
                    self.stats.paused_s += step  # (a wait for a slot is not a pause)
                self._cond.wait(timeout=step)

    def release(self, outcome: str, retry_after: float | None = None, latency_s: float | None = None) -> None:
        """End a request: ``outcome`` "ok", "timeout" (the slot becomes a ghost), "overload" (HTTP
        429/503/504) or "error" (anything else: no change of limit); ``retry_after`` (s): the
        server's Retry-After; ``latency_s``: the request's seconds (a slow success holds the limit).

        Raises:
            ValueError: an unknown outcome.
        """
        if outcome not in ("ok", "timeout", "overload", "error"):
            raise ValueError(f"outcome must be ok, timeout, overload or error, got {outcome!r}")
        with self._cond:
            now = self._clock()
            self._live = max(0, self._live - 1)
            if outcome == "timeout":
                self.stats.timeouts += 1
                if self.adaptive and self.ghost_s > 0:
                    heapq.heappush(self._ghosts, now + self.ghost_s)
            elif outcome == "overload":
                self.stats.overloads += 1
            if retry_after is not None and retry_after > 0:
                self._paused_until = max(self._paused_until, now + min(float(retry_after), MAX_PAUSE_S))
            if outcome in ("timeout", "overload"):
                self._streak = 0
                if self.adaptive and now - self._last_cut >= self.cooldown_s:
                    self._threshold = max(1, self.limit // 2)
                    self._last_cut = now
                    if self.limit > 1:
                        self._set(self._threshold, now, "timeout" if outcome == "timeout" else "overload")
                        self.stats.cuts += 1
            elif outcome == "ok" and self.slow_s is not None and latency_s is not None and latency_s > self.slow_s:
                self._streak = 0
            elif outcome == "ok":
                self._streak += 1
                if self.adaptive and self._streak >= self.limit and self.limit < self.ceiling:
                    self._streak = 0
                    grown = 2 * self.limit if self.limit < self._threshold else self.limit + 1
                    self._set(min(grown, self._threshold if self.limit < self._threshold else self.ceiling), now,
                              "slow start" if self.limit < self._threshold else "success")
            self._cond.notify_all()

    def _set(self, limit: int, now: float, why: str) -> None:
        self.limit = limit
        self.stats.lowest = min(self.stats.lowest, limit)
        self.stats.changes.append((round(now - self._t0, 3), limit, why))
