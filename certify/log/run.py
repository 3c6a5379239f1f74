"""``certify_log``: stream a log through the family's tally, chunk by chunk, and certify it.

The file is read line by line (binary, never whole): lines [start, stop) of it, numbered from
``first_line`` (a piece of a split log keeps its place in the whole); ``CHUNK_LINES`` lines at a
time go to ``workers`` processes (at most 2 chunks per worker in flight: memory stays bounded
whatever the file's length), each returns the chunk's ``tally.Tally`` and the main process adds
them.  Every ``checkpoint_s`` seconds and at the end the running tally is written to ``out`` (a
partial result: the lines it covers, its sums), so a stopped run continues with ``resume`` from
the last checkpoint, and shards of one log merge (``merge_files``) into the certificate one pass
gives.  The worker processes, and the ``certify log`` command's own, keep their freed memory for
the next chunk (``allocator.keep_freed_memory``: no page faults for each chunk's temporaries); a
caller's process that runs ``certify_log`` with one worker is left as it is.

**Looks.**  Each run that computes and shows the tests is a look of the certificate; the partial
result keeps the looks (``looks``: [{"j", "lines", "records", "alpha", "verdict"}]), and a run
that resumes it — a stopped run continued, or the same log run again once it has grown — is the
next look: its KS rows and report tests take α_j = α/(j(j+1)), the e-values their whole share
(``oracle.look_spending``), so the false-alarm rate stays ≤ α over any number of looks.  A run
that reads no new line shows the last look again (the same tests on the same lines, not a new
look); a certificate whose look FAILed is not continued.  A merge of shards is look max(1, the
most looks a shard's file holds).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import time
from collections import deque
from concurrent.futures import BrokenExecutor
from dataclasses import dataclass, field

import numpy as np

from spectr_gbv.certify.topk_laws import (DEFAULT_MAX_BOUND, SKIP_REASONS, record_arrays, reported_precisions,
                                          request_law)
from spectr_gbv.certify.log.allocator import keep_freed_memory
from spectr_gbv.certify.log.parse import parse_line
from spectr_gbv.certify.log.tally import Tally
from spectr_gbv.oracle.look_spending import look_alpha
from spectr_gbv.oracle.outcome import verdict_word

CHUNK_LINES = 1000


@dataclass
class LogPlan:
    """What a log certification asks.

    Attributes:
        alpha: the family's false-alarm rate; tolerance: η (per-token TV put down to numerics);
        seed: the PIT uniforms' seed; vocab: V when known (T > 1 needs it unless the lists cover
        the law); max_bound: the largest bound of a position's law kept (``cells``); workers:
        processes; checkpoint_s: seconds between partial results written.
    """

    alpha: float = 1e-3
    tolerance: float = 1e-3
    seed: int = 0
    vocab: int = 0
    max_bound: float = DEFAULT_MAX_BOUND
    workers: int = 1
    checkpoint_s: float = 30.0

    def check(self) -> None:
        """Raises ValueError naming the first field out of range."""
        for name, ok in (("alpha", 0 < self.alpha < 1), ("tolerance", 0 <= self.tolerance < 1),
                         ("seed", self.seed >= 0), ("vocab", self.vocab >= 0), ("max_bound", 0 < self.max_bound <= 1),
                         ("workers", self.workers >= 1), ("checkpoint_s", self.checkpoint_s > 0)):
            if not ok:
                raise ValueError(f"{name} = {getattr(self, name)!r} is out of range")


def process_samples(samples, tally: Tally, vocab: int = 0, max_bound: float = DEFAULT_MAX_BOUND) -> None:
    """Add parsed samples (``parse.Sample``) to ``tally``: their arrays, the request's law at each
    position (``cells.request_law``), the record fields (``cells.record_arrays``), the sums."""
    got = chunk_records(samples, tally, vocab, max_bound)
    if got is not None:
        ra, line, choice, pos, sample_of, kept = got
        tally.add(ra, line, choice, pos, sample_of, len(kept))


def chunk_records(samples, tally: Tally, vocab: int = 0, max_bound: float = DEFAULT_MAX_BOUND):
    """The record arrays of parsed samples (``cells.record_arrays``) and where each row belongs:
    (arrays, line, choice, position, sample index, the samples), or None when there is none;
    samples skipped whole and positions skipped are counted in ``tally``."""
    if not samples:
        return None
    lens = np.fromiter(itertools.chain.from_iterable(s.lens for s in samples), dtype=np.int64)
    npos = np.array([len(s.lens) for s in samples], dtype=np.int64)
    N = int(npos.sum())
    if N == 0:
        return None
    k = int(lens.max())
    try:
        lps = np.fromiter(itertools.chain.from_iterable(s.lps for s in samples), dtype=np.float64,
                          count=int(lens.sum()))
    except (TypeError, ValueError):  # a value that is no number: find the sample, skip it, redo
        good = []
        for s in samples:
            try:
                np.array(s.lps, dtype=np.float64)
                good.append(s)
            except (TypeError, ValueError, OverflowError):
                tally.skipped["shape"] += 1
        return chunk_records(good, tally, vocab, max_bound)
    ids = np.concatenate([s.ids for s in samples])
    row = np.repeat(np.arange(N), lens)
    starts = np.cumsum(lens) - lens
    col = np.arange(lens.sum()) - np.repeat(starts, lens)
    L = np.full((N, k), -np.inf)
    I = np.full((N, k), -1, dtype=np.int64)
    L[row, col] = lps
    I[row, col] = ids
    sample_of = np.repeat(np.arange(len(samples)), npos)
    bad_row = np.any(np.isnan(L) | (L > 1e-6), axis=1)
    # probability descending, ties by id (servers send their lists sorted: then nothing moves)
    if not np.all((L[:, 1:] < L[:, :-1]) | (L[:, 1:] == -np.inf)):
        order = np.lexsort((I, -L), axis=1)
        L = np.take_along_axis(L, order, axis=1)
        I = np.take_along_axis(I, order, axis=1)
    per = lambda attr, dt: np.repeat(np.array([getattr(s, attr) for s in samples], dtype=dt), npos)  # noqa: E731
    valid = np.isfinite(L) & (np.arange(k)[None, :] < per("k", np.int64)[:, None])  # cut to the request's k
    count = valid.sum(axis=1)
    k = max(1, int(count.max()))  # the columns past every request's k (an appended token) go
    L = np.where(valid, L, -np.inf)[:, :k]
    I = np.where(valid, I, -1)[:, :k]
    valid = valid[:, :k]
    bad_row |= count == 0
    if any(s.text for s in samples):  # "token_id:N" keys of one dict are distinct; text hashes may collide
        srt = np.sort(np.where(valid, I, -1 - np.arange(k)[None, :]), axis=1)
        bad_row |= np.any(srt[:, 1:] == srt[:, :-1], axis=1)
    x = np.concatenate([s.x for s in samples])
    lpx = np.fromiter(itertools.chain.from_iterable(s.lpx for s in samples), dtype=np.float64, count=N)
    beta, top_k, top_p, min_p = per("beta", float), per("top_k", np.int64), per("top_p", float), per("min_p", float)
    starts_s = np.cumsum(npos) - npos
    pos = np.arange(N) - np.repeat(starts_s, npos)
    first = pos == 0
    delta = reported_precisions(L, valid)
    law = request_law(L, np.maximum(count, 1), delta, beta, top_k, top_p, min_p, vocab, max_bound)
    # a sample with a malformed list or a list summing above 1 is skipped whole (records_from_top
    # refuses it)
    bad_sample = np.zeros(len(samples), dtype=bool)
    np.logical_or.at(bad_sample, sample_of, bad_row)
    over = np.zeros(len(samples), dtype=bool)
    np.logical_or.at(over, sample_of, law["skip"] == 6)
    for i in np.flatnonzero(bad_sample):
        tally.skipped["shape"] += 1
    for i in np.flatnonzero(over & ~bad_sample):
        tally.skipped["topk sum"] += 1
    drop = np.repeat(bad_sample | over, npos)
    skip = law["skip"]
    codes = np.bincount(skip[~drop], minlength=len(SKIP_REASONS))
    for code in range(1, len(SKIP_REASONS)):
        if codes[code]:
            tally.skipped_positions[SKIP_REASONS[code]] += int(codes[code])
    law["skip"] = np.where(drop, 7, skip)
    for s, b in zip(samples, bad_sample | over):
        if not b:
            tally.temperatures[f"{1.0 / s.beta:g}"] += 1
    ra = record_arrays(law, I, x, lpx, first)
    line = np.repeat(np.array([s.line for s in samples], dtype=np.int64), npos)
    choice = np.repeat(np.array([s.choice for s in samples], dtype=np.int64), npos)
    return ra, line, choice, pos, sample_of, samples


def tally_lines(lines, plan: LogPlan) -> Tally:
    """The tally of (line number, text) pairs."""
    t = Tally(plan.alpha, plan.tolerance, plan.seed)
    samples = []
    for no, text in lines:
        t.counts["lines"] += 1
        got, skips = parse_line(text, no)
        samples.extend(got)
        for key in skips:
            t.skipped[key] += 1
    process_samples(samples, t, plan.vocab, plan.max_bound)
    return t


def _quiet_worker() -> None:
    """A worker ignores Ctrl-C (the main process stops the run and prints its verdict) and keeps
    its freed memory for the next chunk (``allocator``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_freed_memory()


def _work(args):
    lines, plan = args
    import resource

    cpu = time.process_time()
    t = tally_lines(lines, plan)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return t, sum(len(text) for _, text in lines), time.process_time() - cpu, rss


@dataclass
class LogCertificate:
    """Result of ``certify_log`` or ``merge_files``.

    Attributes:
        plan: the ``LogPlan``; source: the file(s) certified; tally: the sums (``tally.Tally``).
        family: its ``FamilyResult`` (None when no token was tested); reports: the report tests.
        complete: every line asked for was read (False when stopped); wall_s: seconds;
        notes: lines for the report; audit: the ``audit.AuditResult`` (``--audit URL``) or None;
        chunk_cpu_s: CPU seconds the chunks took, in whichever process ran them (workers included);
        peak_rss_kib: the largest peak resident memory of a process that ran chunks.
        look: the certificate's look (1, 2, …; ``oracle.look_spending``); looks: the partial
        result's looks, this one included when it is new.
        ``impossible``, ``logprobs``, ``dependence``: the fields
        ``certify.endpoint.report.decided_by`` reads (a log has no impossible *samples*, no
        second log-prob reference and no duplicate check).
    """

    plan: LogPlan
    source: str
    tally: Tally
    family: object = None
    reports: tuple = ()
    complete: bool = True
    wall_s: float = 0.0
    bytes_read: int = 0
    notes: list = field(default_factory=list)
    impossible: list = field(default_factory=list)
    logprobs: object = None
    dependence: str = ""
    refused: str = ""
    audit: object = None
    chunk_cpu_s: float = 0.0
    peak_rss_kib: int = 0
    look: int = 1
    looks: list = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return ((self.family is not None and not self.family.passed) or any(not r.passed for r in self.reports)
                or (self.audit is not None and self.audit.failed))

    @property
    def verdict(self) -> str:
        """FAIL on any failed test; else INCOMPLETE when stopped before the end; NO DATA when no
        token could be tested; else PASS."""
        if self.failed:
            return verdict_word(False)
        if not self.complete:
            return "INCOMPLETE"
        return "NO DATA" if self.family is None else verdict_word(True)

    @property
    def tokens_per_second(self) -> float:
        return self.tally.counts["records"] / self.wall_s if self.wall_s > 0 else math.nan

    def to_json(self) -> dict:
        from spectr_gbv.certify.log.report import certificate_json

        return certificate_json(self)


def finish(cert: LogCertificate) -> LogCertificate:
    """Compute the certificate's tests from its tally, at its look (``cert.look``)."""
    cert.family = cert.tally.family(look=cert.look)
    cert.reports = cert.tally.reports(look=cert.look) if cert.family is not None else ()
    return cert


def look_record(cert: LogCertificate) -> dict:
    """The partial result's record of the certificate's look (after ``finish``)."""
    covered = [[int(r[0]), int(r[1])] for r in cert.tally.ranges]
    return {"j": cert.look, "lines": covered, "records": int(cert.tally.counts["records"]),
            "alpha": look_alpha(cert.plan.alpha, cert.look), "verdict": cert.verdict}


def write_partial(tally: Tally, path: str, source: str, complete: bool, looks=(), digest: str | None = None,
                  settings: dict | None = None) -> None:
    """The tally as a partial-result file (written to a temporary name, then renamed), with the
    certificate's looks so far, the BLAKE2b digest of the bytes of the lines it covers (``--resume``
    checks that the log still begins with them) and the plan's settings a resumption must keep."""
    d = tally.to_json()
    d["source"], d["complete"], d["looks"] = source, bool(complete), list(looks)
    d["digest"], d["settings"] = digest, settings
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.replace(tmp, path)


def mark_last_look_failed(path: str) -> None:
    """Record in the partial result at ``path`` that its last look FAILed (the audit, decided after
    the file was written); everything else in it is kept."""
    with open(path) as f:
        d = json.load(f)
    d["looks"][-1]["verdict"] = "FAIL"
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.replace(tmp, path)


def read_partial(path: str, what: str) -> tuple[Tally, dict]:
    """(tally, the file's dict) of a partial-result file.

    Raises:
        ValueError: unreadable or not a partial result (``what`` names the argument).
    """
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as err:
        raise ValueError(f"{what}: cannot read {path}: {err.strerror}") from None
    except ValueError:
        raise ValueError(f"{what}: {path} is not JSON (a certify log partial result is)") from None
    return Tally.from_json(d, f"{what} {path}"), d


def certify_log(path: str, plan: LogPlan, *, start: int = 0, stop: int | None = None, first_line: int = 0,
                out: str | None = None, resume: str | None = None, progress=None,
                stop_event=None) -> LogCertificate:
    """Certify the lines [start, stop) of the log at ``path`` (module doc).

    Args:
        path: the JSONL log; plan: ``LogPlan``.
        start, stop: the lines (0-based, of this file) to read; stop None: to the end.
        first_line: the number of this file's first line in the whole log (a split piece).
        out: the partial-result file to write (checkpoints and the end), or None; with ``resume``
            and no ``out``, the resumed file itself (its looks must be counted).
        resume: a partial-result file of an earlier run of the same lines to continue from: a
            stopped run, or the same log grown since (the certificate's next look).
        progress: optional tqdm-like bar (``update(bytes)``, ``set_postfix``); stop_event: a
            ``threading.Event`` that stops the run when set (Ctrl-C also does).
    Returns:
        ``LogCertificate``.
    Raises:
        ValueError: a bad plan or range, an unreadable file, a resume file of other lines or
            settings.
    """
    plan.check()
    if start < 0 or (stop is not None and stop <= start) or first_line < 0:
        raise ValueError(f"lines: need 0 <= start < stop and first_line >= 0, got start {start}, stop {stop}, "
                         f"first_line {first_line}")
    if not os.path.isfile(path):
        raise ValueError(f"FILE: {path} is not a file")
    started = time.perf_counter()
    tally = Tally(plan.alpha, plan.tolerance, plan.seed)
    resume_at = start
    prior: list = []
    out = out or resume
    settings = {"vocab": plan.vocab, "max_bound": plan.max_bound}
    want_digest = None
    if resume:
        tally, d = read_partial(resume, "--resume")
        prior = list(d.get("looks") or [])
        bad = next((lk for lk in prior if lk.get("verdict") == "FAIL"), None)
        if bad is not None:
            raise ValueError(f"--resume: look {bad.get('j')} of the certificate in {resume} (lines {bad.get('lines')}) "
                             "FAILED and its verdict stands; certify again with a new --out")
        old = {"--alpha": tally.alpha, "--tolerance": tally.tolerance, "--seed": tally.seed,
               **{f"--{k.replace('_', '-')}": v for k, v in (d.get("settings") or settings).items()}}
        new = {"--alpha": plan.alpha, "--tolerance": plan.tolerance, "--seed": plan.seed,
               **{f"--{k.replace('_', '-')}": v for k, v in settings.items()}}
        for flag in old:
            if old[flag] != new[flag]:
                raise ValueError(f"--resume: {resume} was run with {flag} {old[flag]}, this run asks {new[flag]}: the "
                                 "looks of one certificate keep its settings")
        if len(tally.ranges) != 1 or tally.ranges[0][0] != first_line + start:
            raise ValueError(f"--resume: {resume} covers lines {tally.ranges} of the log, not a run from line "
                             f"{first_line + start}")
        resume_at = tally.ranges[0][1] - first_line
        want_digest = d.get("digest")
    source = os.path.abspath(path)
    cert = LogCertificate(plan, source, tally, looks=prior)
    next_line = resume_at
    pending: deque = deque()
    pool = None
    if plan.workers > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # workers forked from a clean server, not from this process (its progress bar's thread may
        # hold a lock at fork: a forked worker then hangs); a worker that dies raises
        # BrokenProcessPool instead of leaving its chunk unanswered
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":  # the server imports this module (numpy, scipy) once, not each worker
            ctx.set_forkserver_preload([__name__])
        pool = ProcessPoolExecutor(plan.workers, mp_context=ctx, initializer=_quiet_worker)

    def absorb(t, nbytes, cpu, rss):
        nonlocal tally
        cert.chunk_cpu_s += cpu
        cert.peak_rss_kib = max(cert.peak_rss_kib, rss)
        tally.merge(t)
        if progress is not None:
            progress.update(nbytes)
            progress.set_postfix(lines=tally.counts["lines"], tokens=tally.counts["records"], refresh=False)

    digest = hashlib.blake2b(digest_size=16)  # of the bytes of lines [start, …) read in order

    def verify(seen: int):
        """A resumed log must begin with the lines its certificate covers (not a shorter, rotated or
        other file)."""
        if seen < resume_at - start:
            raise ValueError(f"--resume: {path} has {start + seen} lines; the certificate in {resume} covers lines "
                             f"{first_line + start}..{first_line + resume_at - 1}: not the log it certified")
        if want_digest is not None and digest.hexdigest() != want_digest:
            raise ValueError(f"--resume: lines {first_line + start}..{first_line + resume_at - 1} of {path} differ from "
                             f"those the certificate in {resume} covers (a rotated or another log): not the log it "
                             "certified")

    def chunks():
        """(lines, the digest up to their end) in chunks of ``CHUNK_LINES``, after the lines resumed."""
        with open(path, "rb", buffering=1 << 20) as f:  # lines of ~10 KB: fewer, larger reads
            batch, seen, checked = [], 0, not resume
            for no, text in enumerate(f):
                if no < start:
                    continue
                if no < resume_at:
                    digest.update(text)
                    seen += 1
                    if progress is not None:
                        progress.update(len(text))
                    continue
                if not checked:
                    verify(seen)
                    checked = True
                if stop is not None and no >= stop:
                    break
                if not text.endswith(b"\n"):  # the last line, still being written: the next look reads it
                    cert.notes.append(f"line {first_line + no} has no end of line yet (a log being written): left "
                                      "for the next look")
                    break
                digest.update(text)
                batch.append((first_line + no, text))
                if len(batch) >= CHUNK_LINES:
                    yield batch, digest.copy()
                    batch = []
            if not checked:
                verify(seen)
            if batch:
                yield batch, digest.copy()

    last_write = time.perf_counter()
    covered_from = first_line + resume_at
    done_digest = digest.copy()  # of the lines [start, next_line) once a chunk is absorbed

    def digest_now() -> str | None:
        """The digest of the lines covered: the resumed certificate's own while nothing new is in."""
        return want_digest if resume and next_line == resume_at else done_digest.hexdigest()

    def covered(upto):
        tally.ranges = [[covered_from if not tally.ranges else tally.ranges[0][0], first_line + upto, source]]

    try:
        for batch, dg in chunks():
            upto = batch[-1][0] - first_line + 1
            if pool is None:
                absorb(*_work((batch, plan)))
                next_line, done_digest = upto, dg
            else:
                pending.append((pool.submit(_work, (batch, plan)), upto, dg))
                while len(pending) >= 2 * plan.workers:
                    res, upto_done, dg_done = pending.popleft()
                    absorb(*res.result())  # a dead worker raises here: the lines covered stay those absorbed
                    next_line, done_digest = upto_done, dg_done
            if out and time.perf_counter() - last_write > plan.checkpoint_s:
                covered(next_line)
                write_partial(tally, out, source, False, prior, digest_now(), settings)
                last_write = time.perf_counter()
            if stop_event is not None and stop_event.is_set():
                raise KeyboardInterrupt
        while pending:
            res, upto_done, dg_done = pending.popleft()
            absorb(*res.result())
            next_line, done_digest = upto_done, dg_done
    except KeyboardInterrupt:
        cert.complete = False
        cert.notes.append(f"stopped by the user: {next_line - resume_at} lines certified by this run, lines "
                          f"{first_line + start}..{first_line + next_line - 1} in all; --resume the partial result "
                          "(--out) to continue")
    except BrokenExecutor as err:  # a worker died (killed, out of memory, Ctrl-C reaching it first)
        cert.complete = False
        cert.notes.append(f"stopped: a worker process died ({err}); lines {first_line + start}.."
                          f"{first_line + next_line - 1} certified; --resume the partial result (--out) to continue")
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    covered(next_line)
    cert.tally = tally
    # a run that read no new line shows the last look again; any other run is the next look
    new = not prior or next_line > resume_at
    cert.look = len(prior) + int(new)
    finish(cert)
    if new:
        cert.looks = prior + [look_record(cert)]
    else:
        cert.notes.append(f"no line after line {first_line + next_line - 1}: look {cert.look} of this certificate "
                          "shown again (the same tests on the same lines: no new look)")
    if out:
        write_partial(tally, out, source, cert.complete, cert.looks, digest_now(), settings)
    cert.wall_s = time.perf_counter() - started
    return cert


def merge_files(paths, plan: LogPlan | None = None) -> LogCertificate:
    """The certificate of several partial results merged (shards of one log).

    Raises:
        ValueError: fewer than one file, an unreadable one, or shards that disagree (α, η, seed)
            or overlap.
    """
    if not paths:
        raise ValueError("--merge: give at least one partial-result file")
    started = time.perf_counter()
    tally, complete, sources, most = None, True, [], 0
    for p in paths:
        t, d = read_partial(p, "--merge")
        most = max(most, len(d.get("looks") or []))
        complete &= bool(d.get("complete", False))
        sources.append(str(d.get("source", p)))
        tally = t if tally is None else tally.merge(t)
    plan = plan or LogPlan()
    plan = LogPlan(tally.alpha, tally.tolerance, tally.seed, plan.vocab, plan.max_bound, plan.workers,
                   plan.checkpoint_s)
    cert = LogCertificate(plan, ", ".join(sorted(set(sources))), tally, complete=complete, look=max(1, most))
    if not complete:
        cert.notes.append("a shard's partial result was written before its run finished (INCOMPLETE)")
    finish(cert)
    cert.looks = [look_record(cert)]
    cert.wall_s = time.perf_counter() - started
    return cert

