"""certify/endpoint/pacing.py and the client under load: the certifier is a guest.

Unit checks of ``Pacer`` (halving on overload at most once per cool-down, a timed-out request's
slot held as a ghost, growth after a window of successes, Retry-After, the rate cap), then the
whole certifier against a server that slows down under load (tests/helpers/fake_deployment.py
``serial_s``: one request computed at a time, 100 ms each, abandoned requests computed all the
same; request timeout 0.3 s, 2 retries).  At 8 requests in flight the queue alone takes
8 × 100 ms = 0.8 s > 0.3 s, so with a fixed concurrency of 8 the requests time out, their
retries queue behind the abandoned ones, and the run ends INCOMPLETE (in three trial runs on 2
busy cores: 7, 9 and 11 of 24 samples, 7 failed requests each); with the adaptive pacer (the
default) the same plan completes and passes with no failed request (3 of 3 trials), and the
report says what to change.
"""

from __future__ import annotations

import threading
import time

import pytest

from helpers.fake_deployment import serve
from spectr_gbv.certify.endpoint.endpoint import EndpointRequest, certify_endpoint
from spectr_gbv.certify.endpoint.pacing import Pacer
from spectr_gbv.certify.endpoint.run import Plan


def test_slow_start_then_overload_halves_once_per_cooldown_and_success_grows_back():
    p = Pacer(8, cooldown_s=60.0)
    assert p.limit == 1
    for want in (2, 4, 8):  # a window of `limit` successes doubles the limit up to the ceiling
        for _ in range(p.limit):
            p.acquire()
            p.release("ok")
        assert p.limit == want
    for _ in range(8):
        assert p.acquire()
    for _ in range(8):  # a burst of eight 503s counts once
        p.release("overload")
    assert p.limit == 4 and p.stats.cuts == 1 and p.stats.overloads == 8
    for _ in range(4):  # a window of 4 successes: +1
        p.acquire()
        p.release("ok")
    assert p.limit == 5
    p.slow_s = 1.0
    for _ in range(6):  # a slow success (over slow_s) does not count towards growth
        p.acquire()
        p.release("ok", latency_s=2.0)
    assert p.limit == 5
    p2 = Pacer(8, adaptive=False, cooldown_s=0.0)
    assert p2.limit == 8
    p2.adaptive = True
    for _ in range(5):
        p2.acquire()
        p2.release("overload")
    assert p2.limit == 1 and p2.stats.lowest == 1  # never below 1
    p2.acquire()
    p2.release("error")  # a 500 or a refused connection is no overload signal
    assert p2.limit == 1 and p2.stats.cuts == 3


def test_a_timed_out_request_keeps_its_slot_while_the_server_may_compute_it():
    p = Pacer(2, ghost_s=0.3, cooldown_s=0.0)
    p.limit = 2
    p.acquire()
    p.release("timeout")  # limit 2 -> 1, and a ghost holds that one slot for 0.3 s
    assert p.limit == 1 and p.in_flight == 1
    start = time.monotonic()
    assert p.acquire()
    waited = time.monotonic() - start
    assert 0.25 <= waited < 1.0, waited
    p.release("ok")
    fixed = Pacer(2, adaptive=False, ghost_s=0.3)
    fixed.acquire()
    fixed.release("timeout")
    assert fixed.limit == 2 and fixed.in_flight == 0  # the former behaviour: no ghost, no cut


def test_retry_after_pauses_every_request_and_the_rate_is_capped():
    p = Pacer(4)
    p.acquire()
    p.release("overload", retry_after=0.4)
    start = time.monotonic()
    p.acquire()
    assert time.monotonic() - start >= 0.35
    p.release("ok")
    r = Pacer(8, max_rps=20.0)
    start = time.monotonic()
    for _ in range(6):
        r.acquire()
        r.release("ok")
    assert time.monotonic() - start >= 5 / 20.0 * 0.9  # 6 starts at least 50 ms apart
    stop = threading.Event()
    stop.set()
    assert Pacer(1).acquire(stop) is False


@pytest.mark.parametrize("bad", [dict(ceiling=0), dict(ceiling=2, max_rps=0.0), dict(ceiling=2, ghost_s=-1.0)])
def test_bad_arguments_are_named(bad):
    with pytest.raises(ValueError, match="ceiling|max_rps|ghost_s"):
        Pacer(**bad)
    with pytest.raises(ValueError, match="outcome"):
        Pacer(1).release("late")


def _certify(url, tmp_path, adaptive: bool, name: str):
    plan = Plan(n_samples=24, n_new=6, concurrency=8, replays=0, max_errors=6)
    req = EndpointRequest(url=url, plan=plan, record=str(tmp_path / f"{name}.jsonl"), timeout_s=0.3, retries=2,
                          adaptive=adaptive)
    return certify_endpoint(req)


def test_a_server_that_slows_under_load_completes_only_with_the_adaptive_pacer(tmp_path):
    """Fixed 8 in flight: INCOMPLETE (requests time out and their retries stack on the abandoned
    ones); adaptive: PASS, its requests in flight lowered, and the report names --timeout and
    --concurrency.  Each server is bounded (600 requests, 60 s) and stopped by the test."""
    with serve(serial_s=0.1, max_requests=600, time_limit_s=60) as (url, state):
        fixed = _certify(url, tmp_path, adaptive=False, name="fixed")
        fixed_requests = state.requests
    assert fixed.verdict == "INCOMPLETE" and not fixed.complete and fixed.samples < 24
    assert sum(fixed.errors.values()) > 0 and any("timed out" in n for n in fixed.notes)
    with serve(serial_s=0.1, max_requests=600, time_limit_s=60) as (url, state):
        t0 = time.perf_counter()
        gentle = _certify(url, tmp_path, adaptive=True, name="adaptive")
        wall = time.perf_counter() - t0
        gentle_requests = state.requests
    assert gentle.verdict == "PASS" and gentle.complete and gentle.samples == 24, (gentle.notes, gentle.first_errors)
    assert sum(gentle.errors.values()) == 0
    note = next(n for n in gentle.notes if "timed out" in n)
    assert "--timeout 0.6" in note and "--concurrency" in note
    assert wall < 30
    # the whole adaptive run (56 answers needed: 8 prompts tokenized, 24 samples, 24 references)
    assert gentle_requests < 2 * 56 and fixed_requests > 56
