"""``certify_deployment``: certify what a deployment samples, through its own API.

The whole path, in order:

1. **Plan** (``Plan``): N samples of n tokens at temperature T, spread over the prompts (sample i
   uses prompt i mod P and the engine seed ``sample_seed(seed, i)``), k alternatives per position
   from the reference, α and η of the test family, at most C requests in flight (the client's
   ``pacing.Pacer`` lowers that while the server times out or says it is overloaded).  A
   sequential plan (``Plan.sequential``, the CLI's default; ``sequential``) samples in looks at
   counts fixed before any sample (N, 2N, 4N, … up to ``max_samples``) and runs the tests (5.)
   at each look, stopping at the first FAIL, when the look resolves its targets, or when its
   budget ends.
2. **Sampling**: C worker threads each take a sample index, ask the engine for it
   (``ServerEngine``: one seeded request), and — for a remote reference — ask the reference for the
   continuation's laws at once (the server batches the requests in flight).  A local reference
   (``hf:``, ``gguf:``) runs in the main thread on batches of samples.
3. **Storage**: every sample is appended to the run file as it arrives (``store.RunFile``), with
   its per-token records; ``--resume`` continues from the file, asking only for the samples
   it lacks (no sample lost or counted twice: each index once, each with its own seed).
4. **Checks of the samples themselves**: a token outside the reference's vocabulary, or one the
   server's own prefill refuses, makes the sample *impossible* (the verdict fails); identical
   samples for different seeds, far more often than the target's law allows (Poisson p < 1e-9),
   stop the run and FAIL it with the dependence named (a response cache, seeds ignored by a
   deterministic sampler: the samples are not independent; the law tests then run on the samples
   collected and are reported as conditional on independence); a few seeds are replayed (samples
   0, 1, 2, each asked again as soon as it is in, ahead of the queued samples) and the
   verdict says whether the deployment reproduces a sample from its seed (informational).
5. **Tests**: ``oracle.sequence_family.family_test`` on every sample's records (omnibus PIT and
   directional tests, Bonferroni over the family); the report tests of ``oracle.sequence_reports``
   (top-k lists that claim the whole law while samples leave them; samples of one prompt
   sharing prefixes beyond what independence allows — then the verdict says "samples
   dependent"; the engine's reported log-probabilities of its sampled tokens against the
   reference's, temperature 1 as servers report them, by a sign test of their median gap
   against ``Plan.logprob_shift``), at their share of α taken from the family's per-position
   rows; and a deterministic bound on each single gap: ≤ ``Plan.logprob_tolerance`` nats.
   With ``--reference reported`` (``Plan.reported``) the sampling request asks for the top-k
   lists of every sampled position and the samples are tested against those reported laws; an
   **audit** (``Plan.audit``: a fraction of the samples, at least ``Plan.audit_min``, chosen by a
   hash of (seed, index) the server cannot see) re-scores its samples by prefill (``self`` or
   ``--audit-reference``): the family on the prefill's laws, the reported log-probabilities of the
   sampled tokens against the prefill's (sign test and the 1-nat bound) and the reported lists
   against the prefill's lists (the 1-nat bound per listed token), at their own α
   (``AuditCheck``).  ``--as-client`` (``Plan.as_client``) sends the request as the client does
   (no sampling field, or ``Plan.template``'s) and tests against the declared law
   (``references.Declared``).
6. **Stopping**: Ctrl-C or SIGTERM stops the workers; the certificate is computed on the samples
   collected so far (a sequential plan: the longest prefix of indices, at that look's share;
   ``complete`` False) and the run file keeps them.

Requests that fail (after the client's retries) are logged and asked again on resumption; more
than ``Plan.max_errors`` of them stop the run.
"""

from __future__ import annotations

import collections
import math
import queue
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from spectr_gbv.certify.endpoint.client import EndpointError
from spectr_gbv.certify.endpoint.references import raw_logprob_gap
from spectr_gbv.certify.endpoint.sequential import (MAX_SAMPLES, MAX_TIME_S, TARGETS, looks,
                                                     resolution, samples_needed)
from spectr_gbv.certify.endpoint.servers import ProtocolError
from spectr_gbv.oracle.look_spending import look_alpha
from spectr_gbv.oracle.outcome import verdict_word
from spectr_gbv.oracle.sequence_family import FamilyResult, family_test
from spectr_gbv.oracle.sequence_reports import DEFAULT_SHIFT, INDEPENDENCE, planned_share, report_tests, signed_gaps

PIT_STREAM = 0x50495421  # the PIT's uniforms: a stream no engine seed shares
AUDIT_STREAM = 0x41554454  # the audit's selection: a stream no other draw shares
SEED_STREAM = 0x53454544  # the engine seeds


@dataclass
class Plan:
    """What a certification asks (module doc).

    Attributes:
        n_samples: N ≥ 1; n_new: tokens per sample ≥ 1; temperature: T > 0; k: alternatives per
        position from a top-k reference (≥ 1); alpha: the family's false-alarm rate; tolerance:
        η, per-token TV put down to float rounding; logprob_tolerance: the largest gap (nats)
        allowed between a reported and a reference log-probability (default 1: bfloat16 decode
        against prefill drifts by up to 0.15 nats on Qwen2.5-0.5B, docs/engines.md; a
        log-probability reported from another model, position or step is off by whole nats);
        logprob_shift: τ, the nats the reported log-probabilities' median gap may move by
        numerics (the sign test of ``oracle.sequence_reports``: a systematic misreport beyond it
        fails; bfloat16 drift, sd ~0.15 and mean ~0, stays within it);
        seed: the run's seed (engine
        seeds and PIT uniforms derive from it); concurrency: C requests in flight; replays: seeds
        asked twice (samples 0 … replays − 1, each asked again as soon as it is in, ahead of the
        samples still queued; a sample found impossible is not replayed); max_errors: failed
        requests before the run stops.
        sequential: the plan sized by what it must resolve (``certify.endpoint.sequential``: the
        CLI's default): ``n_samples`` is then the pilot, the first of the looks, and sampling goes on
        by doubling until the targets are resolved, a look fails, or ``max_samples`` samples or
        ``max_time_s`` seconds (None: no limit) are spent; False: one look of ``n_samples`` at α.
    """

    n_samples: int = 80  # power >= 0.99 against T 0.9 and top-p 0.95 with a top-20 reference (benchmarks/DEPLOYMENT.md)
    n_new: int = 16
    temperature: float = 1.0
    k: int = 20
    alpha: float = 1e-3
    tolerance: float = 1e-3
    auto_tolerance: bool = False
    logprob_tolerance: float = 1.0
    logprob_shift: float = DEFAULT_SHIFT
    seed: int = 0
    concurrency: int = 8
    replays: int = 3
    max_errors: int = 20
    sequential: bool = False
    max_samples: int = MAX_SAMPLES
    max_time_s: float | None = MAX_TIME_S
    top_p: float = 1.0
    sampling_top_k: int = 0
    min_p: float = 0.0
    as_client: bool = False
    template: dict | None = None
    reported: bool = False
    audit: float = 0.1
    audit_min: int = 8
    vocab: int = 0

    def declared(self, vocab: int = 0):
        """The law the samples are tested against (``references.Declared``; V: ``vocab`` or the
        plan's)."""
        from spectr_gbv.certify.endpoint.references import Declared

        return Declared(self.temperature, self.top_p, self.sampling_top_k, self.min_p, int(vocab or self.vocab or 0))

    def audited(self, i: int) -> bool:
        """Whether sample i is audited (``reported`` only): a uniform of (seed, i) below ``audit``,
        or among the ``audit_min`` smallest uniforms of the first look's indices."""
        if not self.reported or self.audit <= 0:
            return False
        if _audit_u(self.seed, i) < self.audit:
            return True
        first = self.looks()[0]
        return i < first and i in _audit_floor(self.seed, first, self.audit_min)

    def looks(self) -> list[int]:
        """The looks' sample counts (``sequential.looks``; one look of ``n_samples`` when fixed)."""
        return looks(self.n_samples, self.max_samples) if self.sequential else [self.n_samples]

    @property
    def planned_samples(self) -> int:
        """The most samples the plan may draw."""
        return self.looks()[-1]

    def check(self) -> None:
        """Raises ValueError naming the first field out of range."""
        checks = [("n_samples", self.n_samples >= 1), ("n_new", self.n_new >= 1), ("k", self.k >= 1),
                  ("temperature", self.temperature > 0), ("alpha", 0 < self.alpha < 1),
                  ("tolerance", 0 <= self.tolerance < 1), ("logprob_tolerance", self.logprob_tolerance > 0),
                  ("logprob_shift", 0 <= self.logprob_shift < math.inf),
                  ("seed", self.seed >= 0), ("concurrency", self.concurrency >= 1), ("replays", self.replays >= 0),
                  ("max_errors", self.max_errors >= 0),
                  ("max_samples", not self.sequential or self.max_samples >= self.n_samples),
                  ("max_time_s", self.max_time_s is None or self.max_time_s > 0),
                  ("top_p", 0 < self.top_p <= 1), ("sampling_top_k", self.sampling_top_k >= 0),
                  ("min_p", 0 <= self.min_p < 1), ("audit", 0 <= self.audit <= 1), ("audit_min", self.audit_min >= 0), ("vocab", self.vocab >= 0),
                  ("template", self.template is None or isinstance(self.template, dict))]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"{name} = {getattr(self, name)!r} is out of range")


def sample_seed(seed: int, i: int) -> int:
    """The engine seed of sample i: a hash of (seed, i) in [0, 2^31 − 1) (never consecutive
    integers: a server that offsets seeds per request must not make two samples share one)."""
    return int(np.random.SeedSequence([int(seed), int(i), SEED_STREAM]).generate_state(1)[0]) % (2**31 - 1)


def _audit_u(seed: int, i: int) -> float:
    return float(np.random.SeedSequence([int(seed), int(i), AUDIT_STREAM]).generate_state(1)[0]) / 2**32


_FLOORS: dict = {}


def _audit_floor(seed: int, first: int, m: int) -> frozenset:
    key = (seed, first, m)
    if key not in _FLOORS:
        u = [_audit_u(seed, i) for i in range(first)]
        _FLOORS[key] = frozenset(int(j) for j in np.argsort(u, kind="stable")[:m])
    return _FLOORS[key]


def audit_power(m: int, beta: float = 0.05) -> float:
    """The smallest fraction f of misreported samples that m audited samples see with
    probability ≥ 1 − β: (1 − f)^m ≤ β."""
    return 1.0 - beta ** (1.0 / m) if m > 0 else 1.0


def pit_seed(seed: int) -> int:
    return int(np.random.SeedSequence([int(seed), PIT_STREAM]).generate_state(1)[0])


class ServerEngine:
    """The engine side: one seeded sampling request (``servers.Dialect.sample_request``: every
    sampling field at the declared law; ``--as-client``: ``client_request``, the client's shape).
    ``plan`` (optional): its declared law, ``as_client``, ``template`` and, with ``reported``,
    ``logprobs: k`` (the answer's top-k lists, cut to the k most probable)."""

    def __init__(self, endpoint, dialect, model: str, temperature: float, plan: Plan | None = None):
        self.endpoint, self.dialect, self.model, self.T = endpoint, dialect, model, float(temperature)
        self.plan = plan

    def sample(self, prompt_ids, n: int, seed: int):
        plan = self.plan
        if plan is None:
            path, body = self.dialect.sample_request(self.model, prompt_ids, n, seed, self.T)
            return self.dialect.parse_sample(self.endpoint.post(path, body), n)
        lp = plan.k if plan.reported else 1
        if plan.as_client:
            path, body = self.dialect.client_request(self.model, prompt_ids, n, seed, lp, plan.template)
        elif plan.reported or plan.top_p < 1 or plan.sampling_top_k > 0 or plan.min_p > 0:
            path, body = self.dialect.sample_request(self.model, prompt_ids, n, seed, self.T, lp, plan.top_p,
                                                     plan.sampling_top_k, plan.min_p)
        else:
            path, body = self.dialect.sample_request(self.model, prompt_ids, n, seed, self.T)
        s = self.dialect.parse_sample(self.endpoint.post(path, body), n)
        if s.top is not None:
            s.top.cut(plan.k)
        return s


@dataclass
class AuditCheck:
    """The audit of ``--reference reported`` (module doc): samples re-scored by prefill, the share
    asked, the family on the prefill's laws, the report tests (the sampled tokens' reported
    log-probabilities against the prefill's: sign test), the 1-nat bound on those
    (``logprobs``) and on every listed token's reported log-probability against the prefill's
    (``lists``: (entries compared, largest gap, entries over the bound))."""

    samples: int
    fraction: float
    family: FamilyResult | None = None
    reports: tuple = ()
    logprobs: LogprobCheck | None = None
    lists: tuple = (0, 0.0, 0)

    @property
    def passed(self) -> bool:
        return ((self.family is None or self.family.passed) and all(r.passed for r in self.reports)
                and (self.logprobs is None or self.logprobs.passed) and self.lists[2] == 0)

    @property
    def unseen_fraction(self) -> float:
        """Misreporting on this fraction of samples is missed with probability ≤ 0.05."""
        return audit_power(self.samples)


@dataclass
class LogprobCheck:
    """The engine's reported log-probabilities against the reference's (nats): tokens compared,
    median and largest gap, the bound, tokens over it; passed when none is over."""

    n: int
    median: float
    largest: float
    bound: float
    over: int

    @property
    def passed(self) -> bool:
        return self.over == 0


@dataclass
class DeploymentCertificate:
    """Result of ``certify_deployment``.

    Attributes:
        plan: the ``Plan``; server, model, reference: what was certified against what.
        family: the ``FamilyResult`` of the samples collected (None when none was).
        reports: the report tests (``oracle.sequence_reports``: ``DirectionalResult``s at their
            share of α, taken from the family's per-position rows).
        logprobs: ``LogprobCheck`` (None when the engine reports no log-probabilities).
        samples: samples tested; impossible: [(i, reason)] of impossible samples.
        replays: (replayed, identical).
        duplicates: (identical pairs for different seeds, their expected number bound).
        errors: Counter of failed requests by reason; first_errors: their first lines.
        short: positions where the reference gave fewer than k alternatives.
        numerics: with ``Plan.auto_tolerance``, ``(η used, 99th percentile gap, family at η = 0)``:
            the drift measured and whether the exact test (η = 0) passes, which separates "the
            law changed" from "this deployment's numerics differ from the reference"; else None.
        notes: lines for the report; refused: why the run was refused, else "" (a declared law of which
        no position could be tested refuses; no other check refuses
        today: dependent samples FAIL, ``dependence``); dependence: why the samples are not
        independent (identical samples for different seeds, or the shared-prefix test), else "".
        complete: every planned sample collected (a sequential plan: it ended by a look's verdict, the
            targets resolved or a budget spent).  wall_s: seconds.
        look: the certificate's look number of the last test (``oracle.look_spending``: counted
            over every run of the run file; 0 before any), its fixed-sample tests at
            ``look_alpha(plan.alpha, look)``.
        sequence: a sequential plan's course (``sequential``): looks planned, samples tested and
            α_j at each look made (``alphas``; ``numbers``: their j), why it stopped ("fail",
            "resolved", "max-samples", "max-time", "user", "stopped"), the last look's resolution
            {target: (figure, resolved)}, the samples the pilot says resolve every target (None: none
            within reach), the targets;
            None for a fixed plan.
        records: the tested samples' per-token records, in sample order (not in the JSON).
        new_samples: the samples drawn by this run (the others were read back from the run file).
    """

    plan: Plan
    server: str
    model: str
    reference: str
    family: FamilyResult | None = None
    reports: tuple = ()
    logprobs: LogprobCheck | None = None
    samples: int = 0
    impossible: list = field(default_factory=list)
    replays: tuple = (0, 0)
    duplicates: tuple = (0, 0.0)
    errors: Counter = field(default_factory=Counter)
    first_errors: list = field(default_factory=list)
    short: int = 0
    numerics: tuple | None = None
    records: list = field(default_factory=list, repr=False)
    new_samples: int = 0
    notes: list = field(default_factory=list)
    refused: str = ""
    dependence: str = ""
    complete: bool = False
    wall_s: float = 0.0
    sequence: dict | None = None
    audit: AuditCheck | None = None
    look: int = 0

    @property
    def passed(self) -> bool:
        return (not self.refused and not self.dependence and not self.impossible and self.family is not None
                and self.family.passed
                and all(r.passed for r in self.reports) and (self.logprobs is None or self.logprobs.passed)
                and (self.audit is None or self.audit.passed))

    @property
    def failed(self) -> bool:
        """A deviation was found (a FAIL even on part of the plan)."""
        return (bool(self.impossible) or bool(self.dependence)
                or (self.family is not None and not self.family.passed)
                or (self.logprobs is not None and not self.logprobs.passed) or any(not r.passed for r in self.reports)
                or (self.audit is not None and not self.audit.passed))

    @property
    def verdict(self) -> str:
        if self.refused:
            return "REFUSED"
        if self.failed:
            return verdict_word(False)
        return verdict_word(True) if self.complete and self.passed else "INCOMPLETE"

    @property
    def samples_per_second(self) -> float:
        """Samples drawn by this run per second of it."""
        return self.new_samples / self.wall_s if self.wall_s > 0 and self.new_samples else math.nan

    def to_json(self) -> dict:
        from spectr_gbv.certify.endpoint.report import certificate_json

        return certificate_json(self)


class _Stop(Exception):
    pass


class _Budget(Exception):
    """The sequential plan's time budget ran out."""


def certify_deployment(engine, reference, prompts: list, plan: Plan, run_file, *, server: str = "",
                       model: str = "", reference_name: str = "", vocab: int | None = None,
                       progress=None, log=None, stop: threading.Event | None = None,
                       audit_reference=None, shown: bool = True) -> DeploymentCertificate:
    """Certify ``engine`` against ``reference`` (module doc).

    Args:
        engine: ``sample(prompt_ids, n, seed) -> servers.Sample`` (``ServerEngine``).
        reference: ``rows(prompt_ids, tokens)`` and, for local ones, ``rows_many(items)``
            (``references``); ``remote`` says which.
        prompts: P prompts as token id lists.
        plan: the ``Plan``; run_file: ``store.RunFile`` (read back and appended to).
        server, model, reference_name: for the certificate.
        vocab: V when known (ids ≥ V are impossible).
        progress: optional object with ``update(n)`` (a tqdm bar; its ``total`` follows the looks);
            log: optional line callback.
        stop: an event that stops the run when set (else only KeyboardInterrupt does).
        audit_reference: with ``plan.reported``, the prefill reference of the audited samples
            (``references.ServerReference``; None: no audit).
        shown: the tests' results are shown (False: ``--power``'s pilot, which reports only what
            the plan resolves): a shown test is a look of the certificate, kept in the run file.
    Returns:
        ``DeploymentCertificate`` (``complete`` False when stopped or when too many requests failed).
    Raises:
        ValueError: a bad plan or no prompt.
    """
    plan.check()
    if not prompts:
        raise ValueError("prompts: at least one prompt is needed")
    say = log or (lambda line: None)
    cert = DeploymentCertificate(plan, server, model, reference_name)
    cert.notes.extend(run_file.notes)
    started = time.perf_counter()
    deadline = None if not plan.sequential or plan.max_time_s is None else started + plan.max_time_s
    done: dict = dict(run_file.samples)
    impossible: dict = dict(run_file.impossible)
    schedule = plan.looks()
    problem = continuation_problem(run_file, plan) if shown else ""
    if problem:
        raise ValueError(problem)
    # the looks before this run (oracle.look_spending): this run's first look is number j0 + 1, at the
    # first point of its schedule beyond what the earlier looks tested
    j0 = len(run_file.looks)
    k0 = next(k for k, n in enumerate(schedule) if n > run_file.tested) if shown else 0
    stop = stop or threading.Event()
    tasks: queue.Queue = queue.Queue()
    results: queue.Queue = queue.Queue()
    n_replays = min(plan.replays, plan.n_samples)
    replayed_before = {int(e["i"]) for e in run_file.replays}
    for e in run_file.replays:
        cert.replays = (cert.replays[0] + 1, cert.replays[1] + int(bool(e.get("identical"))))
    if progress is not None and (done or impossible):
        progress.update(sum(1 for i in list(done) + list(impossible) if i < schedule[k0]))

    urgent: collections.deque = collections.deque()  # replays, taken before the queued samples
    running = {"n": 0}
    running_lock = threading.Lock()

    def work():
        try:
            while not stop.is_set():
                try:
                    kind, i = urgent.popleft()
                except IndexError:
                    try:
                        kind, i = tasks.get_nowait()
                    except queue.Empty:
                        return
                results.put(_task(kind, i))
        finally:
            with running_lock:
                running["n"] -= 1

    def _task(kind, i):
        prompt = prompts[i % len(prompts)]
        seed = sample_seed(plan.seed, i)
        try:
            s = engine.sample(prompt, plan.n_new, seed)
        except (EndpointError, ProtocolError) as err:
            return ("error", i, f"sample {i}: {err}", None)
        if kind == "replay":
            return ("replay", i, s.tokens, None)
        bad = _bad_tokens(s.tokens, plan.n_new, vocab)
        if bad:
            return bad[0], i, bad[1], s
        if not getattr(reference, "remote", False):
            return ("sampled", i, s, None)
        try:
            if getattr(reference, "reported", False):
                rows = reference.rows_of(s)
                recs = rows.records(s.tokens)
                if audit_reference is not None and plan.audited(i):
                    rows.audit = _audit_event(audit_reference, prompt, s, plan.logprob_tolerance)
            else:
                rows = reference.rows(prompt, s.tokens, s.texts)
                recs = rows.records(s.tokens)
        except EndpointError as err:
            if getattr(err, "status", None) in (400, 422):  # the prefill refuses the sampled tokens
                return ("impossible", i, f"the reference refused the sample ({err})", s)
            return ("error", i, f"reference of sample {i}: {err}", None)
        except ValueError as err:  # ProtocolError, or top-k log-probabilities that are not a law
            return ("error", i, f"reference of sample {i}: {err}", None)
        return ("sample", i, (s, rows, recs), None)

    buffer: list = []
    state = {"errors": 0, "pending": 0}
    replays_asked = set(replayed_before)

    def ask_replay(i):
        """Ask sample i's seed again when i is among the first ``n_replays`` and not asked yet."""
        if i < n_replays and i not in replays_asked and i in done:
            replays_asked.add(i)
            urgent.append(("replay", i))
            state["pending"] += 1
            start_workers(1)

    def record_sample(i, s, rows, recs):
        event = {"kind": "sample", "i": i, "seed": sample_seed(plan.seed, i), "prompt": i % len(prompts),
                 "tokens": [int(t) for t in s.tokens], "reported": s.reported, "raw": rows.raw,
                 "short": rows.short, "records": recs}
        if getattr(rows, "audit", None) is not None:
            event["audit"] = rows.audit
        run_file.write(event)
        done[i] = event
        if progress is not None:
            progress.update(1)

    def flush_local():
        items = [(prompts[i % len(prompts)], s.tokens) for i, s in buffer]
        for (i, s), rows in zip(buffer, reference.rows_many(items)):
            record_sample(i, s, rows, rows.records(s.tokens))
        buffer.clear()
        for i in range(n_replays):
            ask_replay(i)

    def start_workers(n):
        """Start up to ``n`` workers (at least 1), never more than ``plan.concurrency`` running."""
        with running_lock:
            new = max(0, min(plan.concurrency - running["n"], max(1, n)))
            running["n"] += new
        for _ in range(new):
            threading.Thread(target=work, daemon=True).start()

    def collect(upto: int):
        """Sample every index below ``upto`` not yet collected (the module doc's loop)."""
        todo = [i for i in range(upto) if i not in done and i not in impossible]
        for i in todo:
            tasks.put(("sample", i))
        state["pending"] += len(todo)
        start_workers(len(todo))
        for i in range(n_replays):  # samples read back from a run file stopped before their replay
            ask_replay(i)
        while state["pending"] > 0:
            if deadline is not None and time.perf_counter() > deadline:
                raise _Budget
            try:
                kind, i, payload, s = results.get(timeout=0.2)
            except queue.Empty:
                if not running["n"] and (urgent or not tasks.empty()):  # asked as the last worker was leaving
                    start_workers(len(urgent) + tasks.qsize())
                continue
            if kind == "sample":
                state["pending"] -= 1
                record_sample(i, *payload)
                ask_replay(i)
            elif kind == "sampled":
                buffer.append((i, payload))
            elif kind == "impossible":
                state["pending"] -= 1
                event = {"kind": "impossible", "i": i, "seed": sample_seed(plan.seed, i),
                         "prompt": i % len(prompts), "tokens": [int(t) for t in s.tokens], "reason": payload}
                run_file.write(event)
                impossible[i] = event
                if progress is not None:
                    progress.update(1)
            elif kind == "replay":
                state["pending"] -= 1
                same = [int(t) for t in payload] == done[i]["tokens"]
                run_file.write({"kind": "replay", "i": i, "identical": same})
                cert.replays = (cert.replays[0] + 1, cert.replays[1] + int(same))
            elif kind == "error":
                state["pending"] -= 1
                state["errors"] += 1
                run_file.write({"kind": "error", "i": i, "reason": payload})
                cert.errors[payload.split(": ", 1)[-1][:80]] += 1
                if len(cert.first_errors) < 5:
                    cert.first_errors.append(payload)
                say(payload)
                if state["errors"] > plan.max_errors:
                    cert.notes.append(f"stopped: more than {plan.max_errors} requests failed")
                    raise _Stop
            if buffer and (len(buffer) >= getattr(reference, "batch", 8) or len(buffer) >= state["pending"]):
                state["pending"] -= len(buffer)  # a local reference: one batched forward for the buffered samples
                flush_local()
            if kind in ("sample", "sampled") and len(done) in _CHECKPOINTS:
                dup = _duplicates(done, len(prompts))
                if dup[0] >= 3 and _dup_pvalue(*dup) < DUPLICATE_P:
                    cert.duplicates = dup
                    cert.dependence = _dependence(dup)
                    cert.notes.append(f"stopped: samples dependent after {len(done)} samples")
                    raise _Stop

    def prefix() -> int:
        """The longest run of indices 0 … m − 1 collected (sampled or impossible)."""
        m = 0
        while m in done or m in impossible:
            m += 1
        return m

    seq = {"looks": schedule, "tested": [], "alphas": [], "numbers": [], "stopped": "", "resolution": None,
           "needed": None, "targets": dict(TARGETS)} if plan.sequential else None
    k = k0
    alpha_k = look_alpha(plan.alpha, j0 + 1)

    last_tested = {"n": run_file.tested}  # samples the certificate's last look tested

    def collected(upto: int) -> int:
        return sum(1 for i in done if i < upto) + sum(1 for i in impossible if i < upto)

    def looked(n_k):
        """Keep look number j0 + 1 + (k − k0) in the run file and the certificate."""
        if not shown:
            return
        cert.look = j0 + 1 + (k - k0)
        verdict = "FAIL" if cert.failed else ("REFUSED" if cert.refused else "pass")
        # n: the samples the look tested (those of indices below n_k collected: fewer than n_k when a
        # fixed plan stopped with gaps, which a resumed run fills)
        tested = cert.samples + len(cert.impossible)
        last_tested["n"] = tested
        run_file.write({"kind": "look", "j": cert.look, "n": int(tested), "below": int(n_k), "alpha": alpha_k,
                        "verdict": verdict})
        if seq is not None:
            seq["tested"].append(n_k)
            seq["alphas"].append(alpha_k)
            seq["numbers"].append(cert.look)

    def stopped_look(upto, why):
        """A stopped run's tests on what it collected — a new look only when it holds samples the
        certificate's last look did not test (else that look's results stand)."""
        if collected(upto) > last_tested["n"]:
            _stopped_tests(cert, plan, done, impossible, upto, alpha_k, len(prompts), seq, why)
            looked(upto)
            return
        if seq is not None:
            seq["stopped"] = why
        cert.notes.append(f"no sample beyond the {last_tested['n']} the certificate's last look tested: no new look")

    try:
        while True:
            alpha_k = look_alpha(plan.alpha, j0 + 1 + (k - k0))
            if k > k0 and progress is not None:
                if hasattr(progress, "total"):
                    progress.total = schedule[k]
                progress.update(sum(1 for i in list(done) + list(impossible) if schedule[k - 1] <= i < schedule[k]))
            ended = False
            if deadline is not None and k > k0 and time.perf_counter() > deadline:
                seq["stopped"] = "max-time"
                cert.notes.append(f"the time budget ({plan.max_time_s:g} s) ended sampling after look {k} of "
                                  f"{len(schedule)}")
                break
            try:
                collect(schedule[k])
            except _Budget:
                stop.set()
                ended = True
                seq["stopped"] = "max-time"
                cert.notes.append(f"the time budget ({plan.max_time_s:g} s) ended sampling during look {k + 1} of "
                                  f"{len(schedule)}, after {len(done) + len(impossible)} samples; the longest "
                                  "prefix of sample indices collected is tested at that look's share")
            n_k = prefix() if ended else schedule[k]
            if ended and collected(n_k) <= last_tested["n"]:
                break  # nothing new in the prefix: the last look's results stand
            _test_samples(cert, plan, done, impossible, n_k, alpha_k, len(prompts))
            looked(n_k)
            if seq is None:
                break
            recs = [r for rs in cert.records for r in rs]
            if cert.refused:
                seq["stopped"] = "stopped"
                break
            if cert.failed:
                seq["stopped"] = "fail"
                say(f"look {k + 1} of {len(schedule)} ({n_k} samples{_of_certificate(cert.look, k)}): FAIL")
                break
            eta = cert.family.tolerance if cert.family is not None else plan.tolerance
            res = resolution(recs, len(recs), plan.alpha, alpha_k, eta, family=cert.family) if recs else None
            seq["resolution"] = res
            if k == k0 and recs:
                seq["needed"] = samples_needed(recs, len(recs) / max(1, cert.samples), plan.alpha, eta, schedule)
            say(f"look {k + 1} of {len(schedule)} ({n_k} samples{_of_certificate(cert.look, k)}): pass; resolves "
                + ", ".join(f"{name} {v:.3g}" + (" (target met)" if ok else f" (target {TARGETS[name]:g})")
                            for name, (v, ok) in (res or {}).items())
                + ("" if k > k0 or seq["needed"] is None else f"; from the pilot's information per sample, about "
                   f"{seq['needed']} samples resolve every target"))
            if ended:
                break
            if res is not None and all(ok for _, ok in res.values()):
                seq["stopped"] = "resolved"
                break
            if k + 1 >= len(schedule):
                seq["stopped"] = "max-samples"
                break
            k += 1
    except KeyboardInterrupt:
        upto = prefix() if seq is not None else schedule[k]
        cert.notes.append(f"stopped by the user with {len(done) + len(impossible)} samples in (look {k + 1} of the "
                          f"plan asks {schedule[k]}); " + (f"the samples below {upto} tested" if seq is not None
                                                           else "the samples in tested"))
        stopped_look(upto, "user")
    except _Stop:
        upto = prefix() if seq is not None else schedule[k]
        stopped_look(upto, "stopped")
    finally:
        stop.set()
        run_file.close()
    cert.sequence = seq
    cert.new_samples = len(done) + len(impossible) - len(run_file.samples) - len(run_file.impossible)
    stopped = any(n.startswith("stopped") for n in cert.notes)
    if seq is None:
        cert.complete = len(done) + len(impossible) >= plan.n_samples and not cert.refused and not stopped
    else:
        cert.complete = seq["stopped"] in ("fail", "resolved", "max-samples", "max-time") and not stopped
    cert.wall_s = time.perf_counter() - started
    return cert


def _stopped_tests(cert, plan, done, impossible, upto, alpha_k, n_prompts, seq, why):
    """The tests of a run stopped inside a look (Ctrl-C, too many errors, dependent samples): the
    samples below ``upto`` (a sequential plan: the longest prefix collected) at that look's share."""
    _test_samples(cert, plan, done, impossible, upto, alpha_k, n_prompts)
    if seq is not None:
        seq["stopped"] = why
        recs = [r for rs in cert.records for r in rs]
        if recs and cert.family is not None and not cert.failed:
            seq["resolution"] = resolution(recs, len(recs), plan.alpha, alpha_k, cert.family.tolerance,
                                           family=cert.family)


def _of_certificate(j: int, k: int) -> str:
    """"; look j of the certificate" where its number differs from the schedule's (a resumed run)."""
    return "" if j == k + 1 else f"; look {j} of the certificate"


def continuation_problem(run_file, plan: Plan) -> str:
    """Why ``plan`` cannot continue the certificate in ``run_file`` ("" when it can): a look of it
    FAILed (the verdict stands), or the plan's last look is no further than its looks went (a new
    look on the same samples would spend α for nothing)."""
    bad = run_file.failed_look
    if bad is not None:
        return (f"--resume {run_file.path}: look {bad.get('j')} of this certificate ({bad.get('n')} samples) FAILED "
                "and its verdict stands; certify again in a new run file")
    last = plan.looks()[-1]
    if run_file.looks and last <= run_file.tested:
        flag = "--max-samples" if plan.sequential else "--samples"
        return (f"--resume {run_file.path}: its {len(run_file.looks)} looks tested {run_file.tested} samples and this "
                f"plan ends at {last}: nothing to continue; ask more ({flag} above {run_file.tested})")
    return ""


def _test_samples(cert, plan, done, impossible, upto: int, alpha: float, n_prompts: int) -> None:
    """Run the tests on the samples of indices below ``upto`` at the fixed-sample tests' share
    ``alpha`` (the directional e-values at the plan's whole α); fills the certificate's test fields."""
    cert.samples = sum(1 for i in done if i < upto)
    cert.impossible = sorted((i, e.get("reason", "")) for i, e in impossible.items() if i < upto)
    if not cert.dependence:
        sub = {i: e for i, e in done.items() if i < upto}
        cert.duplicates = _duplicates(sub, n_prompts)
        if cert.duplicates[0] >= 2 and _dup_pvalue(*cert.duplicates) < DUPLICATE_P:
            cert.dependence = _dependence(cert.duplicates)
    order = sorted(i for i in done if i < upto)
    cert.short = sum(int(done[i].get("short") or 0) for i in order)
    gaps = [g for i in order for g in raw_logprob_gap(done[i].get("reported"), done[i].get("raw"))]
    cert.logprobs = None
    if gaps:
        cert.logprobs = LogprobCheck(len(gaps), float(np.median(gaps)), float(max(gaps)), plan.logprob_tolerance,
                                     sum(g > plan.logprob_tolerance for g in gaps))
    eta = plan.tolerance
    if plan.auto_tolerance:
        if gaps:
            q99 = float(np.quantile(gaps, 0.99))
            eta = min(0.5, math.expm1(q99) / 2)
        elif not any(n.startswith("--tolerance auto") for n in cert.notes):
            cert.notes.append(f"--tolerance auto: the engine reports no log-probabilities; eta = {plan.tolerance:g}")
    cert.records = [done[i]["records"] for i in order]
    if order and not any("c" in r or r.get("imp") for rs in cert.records for r in rs):
        why = Counter(str(r.get("skip")) for rs in cert.records for r in rs if r.get("skip"))
        cert.refused = (f"no token could be tested against the declared law ({sum(why.values())} positions skipped; "
                        + "; ".join(f"{n}: {reason}" for reason, n in why.most_common(2))
                        + "; docs/guarantees.md): a whole-law reference (hf:, gguf:) or more precise "
                        "log-probabilities are needed")
    if order and not cert.refused:
        samples = cert.records
        flat = [r for s in samples for r in s]
        signed = [g for i in order for g in signed_gaps(done[i].get("reported"), done[i].get("raw"))]
        groups = [done[i]["prompt"] for i in order]
        reserved = planned_share(flat, alpha, signed, groups)  # the report tests' share, outside the family
        cert.reports = report_tests(flat, reserved, signed, plan.logprob_shift, samples, groups, eta)
        shared = next((r for r in cert.reports if r.name == INDEPENDENCE and not r.passed), None)
        if shared is not None and not cert.dependence:
            cert.dependence = (f"samples dependent: {shared.observed:.0f} tokens of samples of one prompt fell where "
                               f"earlier samples went after the same prefix, at most {shared.expected:.2g} expected "
                               f"under independence (log W {shared.statistic:.3g}, p {shared.pvalue:.2g}); the law "
                               "tests assume independent samples: read them as conditional on it")
        cert.family = family_test(samples, alpha, eta, seed=pit_seed(plan.seed), indices=order,
                                  reserved=reserved, directional_alpha=plan.alpha)
        cert.audit = _audit_check(plan, done, order, alpha, eta) if plan.reported else None
        if plan.auto_tolerance and gaps:
            exact = family_test(samples, alpha, 0.0, seed=pit_seed(plan.seed), indices=order,
                                reserved=reserved, directional_alpha=plan.alpha)
            cert.numerics = (eta, q99, exact.passed)


def _audit_event(audit_reference, prompt, s, bound: float) -> dict:
    """One audited sample: the prefill's records at the declared law, its raw log-probabilities
    of the sampled tokens, and the reported lists' largest gap to the prefill's lists (nats, over
    the tokens both list)."""
    rows = audit_reference.rows(prompt, s.tokens, s.texts)
    recs = rows.records(s.tokens)
    gaps = []
    if rows.top is not None and s.top is not None:
        for ids_r, lps_r, ids_p, lps_p in zip(s.top.top_ids, s.top.top_logprobs, rows.top.top_ids,
                                              rows.top.top_logprobs):
            pre = dict(zip(ids_p, lps_p))
            gaps.extend(abs(float(v) - float(pre[i])) for i, v in zip(ids_r, lps_r) if i in pre)
    return {"records": recs, "raw": rows.raw, "list_n": len(gaps), "list_max": max(gaps, default=0.0),
            "list_over": sum(g > bound for g in gaps)}


def _audit_check(plan, done, order, alpha, eta) -> AuditCheck | None:
    """The audit's tests on the audited samples below the look (their own α: ``alpha``, the same
    share as the main tests at this look)."""
    aud = [i for i in order if done[i].get("audit")]
    res = AuditCheck(len(aud), plan.audit)
    if not aud:
        return res
    samples = [done[i]["audit"]["records"] for i in aud]
    flat = [r for s in samples for r in s]
    signed = [g for i in aud for g in signed_gaps(done[i].get("reported"), done[i]["audit"].get("raw"))]
    gaps = [g for i in aud for g in raw_logprob_gap(done[i].get("reported"), done[i]["audit"].get("raw"))]
    if gaps:
        res.logprobs = LogprobCheck(len(gaps), float(np.median(gaps)), float(max(gaps)), plan.logprob_tolerance,
                                    sum(g > plan.logprob_tolerance for g in gaps))
    over = sum(int(done[i]["audit"].get("list_over", 0)) for i in aud)
    res.lists = (sum(int(done[i]["audit"].get("list_n", 0)) for i in aud),
                 max(float(done[i]["audit"].get("list_max", 0.0)) for i in aud), int(over))
    groups = [done[i]["prompt"] for i in aud]
    if flat:
        reserved = planned_share(flat, alpha, signed, groups)
        res.reports = report_tests(flat, reserved, signed, plan.logprob_shift, samples, groups, eta)
        res.family = family_test(samples, alpha, eta, seed=pit_seed(plan.seed + 1), indices=aud,
                                 reserved=reserved, directional_alpha=plan.alpha)
    return res


# sample counts at which the early duplicate check runs (it costs O(samples · tokens))
_CHECKPOINTS = frozenset(2 ** j for j in range(3, 20))


# the duplicate check's level: its false alarms add at most this per check (at most ~20 checks a
# run: the checkpoints and the end) to the certificate's α
DUPLICATE_P = 1e-9


def _dependence(dup: tuple) -> str:
    return (f"samples dependent: the server returned identical samples for different seeds ({dup[0]} pairs; at "
            f"most {dup[1]:.2g} expected under the reference's law, Poisson p < {DUPLICATE_P:g}): a response "
            "cache, or seeds ignored by a deterministic sampler; the samples are not independent (the law "
            "tests assume they are: read them as conditional on it)")


def _bad_tokens(tokens, n: int, vocab: int | None):
    if len(tokens) > n:
        return "error", f"the engine returned {len(tokens)} tokens for max_tokens = {n}"
    if vocab is not None:
        out = [t for t in tokens if not 0 <= int(t) < vocab]
        if out:
            return "impossible", f"token id {out[0]} is outside the reference's vocabulary [0, {vocab})"
    return None


def _duplicates(done: dict, n_prompts: int) -> tuple[int, float]:
    """(pairs of identical samples from one prompt, an upper bound on their expected number under
    the reference: Σ over prompts of C(m, 2) · the mean over its samples of P(sample), each
    P(sample) bounded above by the product of its tokens' cell probabilities)."""
    groups: dict = {}
    for e in done.values():
        groups.setdefault(e["prompt"], []).append(e)
    pairs, expected = 0, 0.0
    for members in groups.values():
        counts = Counter(tuple(e["tokens"]) for e in members)
        pairs += sum(c * (c - 1) // 2 for c in counts.values())
        probs = []
        for e in members:
            logp = sum(math.log(r["c"]) for r in e["records"] if not r.get("imp") and r.get("c", 0) > 0)
            probs.append(math.exp(logp))
        m = len(members)
        expected += m * (m - 1) / 2 * (sum(probs) / m if m else 0.0)
    return pairs, expected


def _dup_pvalue(observed: int, expected: float) -> float:
    from scipy import stats as sps

    return float(sps.poisson.sf(observed - 1, max(expected, 1e-300)))


def plan_dict(plan: Plan, **extra) -> dict:
    """The plan as the run file's header keeps it (``store.PLAN_KEYS`` among them)."""
    return {**asdict(plan), **extra}
