"""Production batches: every law family sampled in batches of several requests at once.

A serving engine batches different requests: different rows, vocabularies padded to one width,
greedy requests beside sampled ones, batch sizes that cross a kernel's tiles.  ``oracle.certify``
sends one case's row B times (a zero-stride view), so a verifier whose row b reads another row's
inputs — a chunk's last row reading the next request's draft or target rows, an index map off by
one (vLLM PR #35398) — sees the same row and passes every law.  ``certify_mixed`` samples the
same cases, each with its own N, in batches that mix them:

* lanes: the cases of one (K, L, dtype) — the contract's arrays fix K and L per call, so rows of
  another K or L go in other calls — at vocabularies of at most ``SMALL_V`` tokens share one lane
  whose rows are zero-padded to the lane's widest V (a zero-padded row has the same exact law:
  no token of probability 0 is ever drafted, accepted or drawn); a case of a larger V has a lane
  of its own, whose calls also carry 1/``PARTNER_EVERY`` of rows of the small cases of its
  (K, L, dtype), padded to its V;
* greedy rows: each call carries greedy requests built from its lane's cases (``greedy_filler``:
  one-hot target rows at their argmax, one-hot draft rows at the drafted tokens, T = 0), one per
  ``FILLER_EVERY`` rows, whose exact law is a point mass (checked: the "greedy rows" check);
* sizes: each lane's first calls have ``BOUNDARY_SIZES`` rows (1, 63–65, 127–129, 255–257: the
  common tile boundaries), then calls of up to ``chunk`` rows (``oracle.certify.rows_per_call``);
  a lane of a real vocabulary (V > ``VOCAB_MIX_V``) mixes calls of 1 and 63–65 rows only
  (``VOCAB_BOUNDARY_SIZES``: each of its rows is K·(2L + 1)·V probabilities; the larger
  boundaries are crossed by the small and V = 4,096 lanes), the rest of its case its row repeated;
* order: each call's rows in a drawn order in which neighbours come from different cases wherever
  the call's rows allow it.

Each row's outcome is tested against its own case's exact law (the four or six tests of
``oracle.certify.certify_case``, per case, at its N and α: the same ``CaseResult``), every row of
every call goes through the output checks of oracle/output_checks.py, and each case's Algorithm 2
records through ``oracle.record_check`` (rows sliced per case).  ``check_batch`` builds the batch
of the seed and batch checks (oracle/seed_contract.py ``check_batch_contract``) from the same
lanes.  The row seeds: case j's sample i gets word i of ``CaseSeeds(seed, j).row_seeds(0, N_j)``
(hashed, unrelated across rows, cases and base seeds: oracle/seeding.py); the greedy rows, the
orders and the partners come from their own streams, so a run replays from its base seed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from spectr_gbv.oracle.certify import (CaseResult, FixedCase, certify_case, exact_verdict_law, rows_per_call,
                                      verdict_outcomes)
from spectr_gbv.oracle.contract_check import SeedCheck
from spectr_gbv.oracle.output_checks import OutputChecks
from spectr_gbv.oracle.seed_contract import collision_probability
from spectr_gbv.oracle.seeding import CaseSeeds
from spectr_gbv.reference.contract import BatchModification, BatchVerdict, ContractViolation, to_numpy
from spectr_gbv.reference.rules import get_rule

__all__ = ["SMALL_V", "BOUNDARY_SIZES", "VOCAB_MIX_V", "VOCAB_BOUNDARY_SIZES", "boundary_sizes", "FILLER_EVERY",
           "PARTNER_EVERY", "CHECK_ROWS", "GREEDY_CHECK",
           "pad_rows", "greedy_filler", "call_sizes", "neighbour_order", "certify_mixed", "MixedRun",
           "check_batch"]

SMALL_V = 64
BOUNDARY_SIZES = (1, 63, 64, 65, 127, 128, 129, 255, 256, 257)
# a lane of a real vocabulary (V > VOCAB_MIX_V) mixes only the first tile's boundary: at V = 151,936 a
# row is K·(2L + 1)·V probabilities, and the 127–129 and 255–257 boundaries are crossed by the other lanes
VOCAB_MIX_V = 65_536
VOCAB_BOUNDARY_SIZES = (1, 63, 64, 65)
FILLER_EVERY = 32
PARTNER_EVERY = 8
# rows of the seed and batch checks' batch (at least): crosses the tiles of 64, 128, 256 and 512 rows
CHECK_ROWS = 513
# rows of the checks' batch when the run has no case of V ≤ SMALL_V (its rows are a real vocabulary's)
LARGE_CHECK_ROWS = 64
GREEDY_CHECK = "greedy rows"
# streams of oracle.seeding.CaseSeeds.node (beyond seeding.py's 0-4 and seed_contract.py's 16-17)
MIX_STREAM, FILLER_STREAM, CHECK_STREAM = 18, 19, 20


def pad_rows(case: FixedCase, V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(draft_tokens int64 [K, L], draft_probs [K, L, V], target_probs [K, L+1, V]): the case's
    rows as handed to a verifier (``backend_*``, its dtype) with zeros appended up to V tokens.

    Raises:
        ValueError: V smaller than the case's vocabulary.
    """
    if V < case.V:
        raise ValueError(f"V must be at least the case's vocabulary {case.V}, got {V}")
    dp, tp = case.backend_draft_probs, case.backend_target_probs
    if V == case.V:
        return case.draft_tokens, dp, tp
    pad = [(0, 0)] * (dp.ndim - 1) + [(0, V - case.V)]
    return case.draft_tokens, np.pad(dp, pad), np.pad(tp, pad)


@dataclass
class _Filler:
    """A greedy request: its rows (at its case's V, the case's dtype) and its one outcome."""

    name: str
    tokens: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    tau: int
    emitted: tuple

    @property
    def V(self) -> int:
        return self.dp.shape[-1]


def greedy_filler(case: FixedCase):
    """The greedy request of ``case`` (temperature 0), or None where its law is not one outcome.

    Its target rows are one-hot at each target row's argmax (lowest id among ties), its draft rows
    one-hot at the drafted tokens, every draft a copy of draft 0 (K i.i.d. drafts from a one-hot
    law are identical: ``oracle.certify_cases.one_hot_draft_case``).  Every registered rule then
    accepts a drafted token iff it is the argmax and emits the argmax; the exact law is computed
    by the case's reference rule (``exact_verdict_law``) and must be one outcome.

    Returns:
        an object with ``tokens``, ``dp``, ``tp`` (the rows, in the case's backend dtype),
        ``tau`` and ``emitted`` (the τ + 1 tokens), or None.
    """
    tokens = np.repeat(case.draft_tokens[:1], case.K, axis=0)
    V = case.V
    target = np.repeat(case.target_probs[:1], case.K, axis=0)
    tp = np.zeros_like(target)
    np.put_along_axis(tp, target.argmax(axis=-1)[..., None], 1.0, axis=-1)
    dp = np.zeros(tokens.shape + (V,))
    np.put_along_axis(dp, tokens[..., None], 1.0, axis=-1)
    law = exact_verdict_law(get_rule(case.reference_rule), tokens, dp, tp)
    outcomes = [o for o, p in law.items() if p > 0]
    if len(outcomes) != 1:
        return None
    tau, accepted, last = outcomes[0]
    dtype = case.backend_draft_probs.dtype
    return _Filler(case.name + " greedy", tokens, dp.astype(dtype), tp.astype(dtype), int(tau),
                   tuple(accepted) + (int(last),))


def call_sizes(total: int, cap: int) -> list[int]:
    """The sizes of a lane's calls for ``total`` rows: ``BOUNDARY_SIZES`` first (each at most
    ``cap`` and what is left), then calls of ``cap`` rows, the last one the remainder."""
    sizes, left = [], int(total)
    for s in BOUNDARY_SIZES:
        if left <= 0:
            break
        s = min(s, cap, left)
        sizes.append(s)
        left -= s
    while left > 0:
        s = min(cap, left)
        sizes.append(s)
        left -= s
    return sizes


def neighbour_order(labels, rng: np.random.Generator) -> np.ndarray:
    """A drawn permutation of ``labels`` (ints [n]) that spreads each label evenly: the i-th of a
    label's n_l items (in a drawn order) gets the key (i + u)/n_l, u uniform, and the items are
    sorted by key, so labels alternate in proportion and two neighbours share a label only where
    one label holds more than half of the items (or by the draw of u, rarely)."""
    labels = np.asarray(labels)
    keys = np.empty(labels.size)
    for lab in np.unique(labels).tolist():
        where = np.flatnonzero(labels == lab)
        where = where[rng.permutation(where.size)]
        keys[where] = (np.arange(where.size) + rng.random(where.size)) / where.size
    return np.argsort(keys, kind="stable")


@dataclass
class _Lane:
    """One lane of calls (module doc): its key, V, its main cases, the small cases it borrows
    rows from, and its greedy rows."""

    K: int
    L: int
    dtype: str
    V: int
    main: list = field(default_factory=list)      # case indices
    partners: list = field(default_factory=list)  # case indices of borrowed rows
    fillers: list = field(default_factory=list)   # _Filler


@dataclass
class MixedRun:
    """What ``certify_mixed`` returns: ``results`` (CaseResult per case, in the cases' order),
    ``checks`` (the output checks of oracle/output_checks.py over every call, and "greedy rows"),
    ``calls`` (the calls made), ``lanes`` (one line per lane: its cases, V and call sizes)."""

    results: list
    checks: list
    calls: int
    lanes: list


def boundary_sizes(V: int) -> tuple[int, ...]:
    """The sizes of the first mixed calls of a lane of vocabulary V: ``BOUNDARY_SIZES``, or
    ``VOCAB_BOUNDARY_SIZES`` for V > ``VOCAB_MIX_V`` (module doc)."""
    return VOCAB_BOUNDARY_SIZES if V > VOCAB_MIX_V else BOUNDARY_SIZES


def _lanes(cases: list) -> list[_Lane]:
    groups: dict = {}
    for j, case in enumerate(cases):
        key = (case.K, case.L, str(case.backend_draft_probs.dtype))
        groups.setdefault(key, []).append(j)
    lanes = []
    for (K, L, dtype), members in groups.items():
        small = [j for j in members if cases[j].V <= SMALL_V]
        if small:
            lanes.append(_Lane(K, L, dtype, max(cases[j].V for j in small), small))
        for j in members:
            if cases[j].V > SMALL_V:
                lanes.append(_Lane(K, L, dtype, cases[j].V, [j], list(small)))
    return lanes


class _Case:
    """Per-case state of a mixed run: its seeds, and what its rows got (τ, tokens, records) in the
    order of its seeds, until a call that held its rows failed."""

    def __init__(self, j: int, case: FixedCase, n: int, seed: int):
        self.j, self.case, self.n = j, case, n
        self.seeds = CaseSeeds(seed, j).row_seeds(0, n)
        self.taus: list = []
        self.tokens: list = []
        self.records: list = []  # per call: (rows, record fields or None or "malformed")
        self.calls = 0
        self.stopped = None
        self.seconds = 0.0

    @property
    def done(self) -> int:
        return sum(len(t) for t in self.taus)


_RECORD_FIELDS = ("rho", "log_q_joint", "log_p_joint", "active")


def _record_rows(mod, index: np.ndarray, B: int):
    """The record fields of rows ``index`` of a call's modification: None (no record), a dict
    (kind, K and the four fields' values on those rows) or "malformed" (fields not of shape [B])."""
    if mod is None:
        return None
    try:
        fields = {name: np.asarray(to_numpy(getattr(mod, name))).reshape(-1) for name in _RECORD_FIELDS}
        if any(v.shape != (B,) for v in fields.values()):
            return "malformed"
        return {"kind": mod.kind, "K": int(mod.K), **{k: v[index] for k, v in fields.items()}}
    except Exception:  # noqa: BLE001 - a malformed record: RecordCheck reports it
        return "malformed"


class _Malformed:
    """A modification record without its fields (replays a malformed one)."""

    kind, K = "malformed", 0


class _Replay:
    """A verifier that gives back, in order, what a case's rows got in the mixed calls, so that
    ``oracle.certify.certify_case`` tests them exactly as it tests a verifier's own calls (the same
    tests, tables and record check); it raises the error that stopped the case where its rows
    stopped."""

    def __init__(self, st: _Case, L: int):
        self.tau = np.concatenate(st.taus) if st.taus else np.zeros(0, dtype=np.int64)
        self.tokens = np.concatenate(st.tokens) if st.tokens else np.zeros((0, L + 1), dtype=np.int64)
        self.records = [r for rows, rec in st.records for r in ([rec] * len(rows) if not isinstance(rec, dict) else
                                                                 [dict(rec, row=i) for i in range(len(rows))])]
        self.error = st.stopped[0] if st.stopped is not None else None
        self.pos = 0

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds):
        B = len(seeds)
        if self.pos + B > self.tau.size:
            if self.error is not None:
                raise self.error
            raise ContractViolation(f"{self.tau.size} rows were sampled, {self.pos + B} asked")
        rows = slice(self.pos, self.pos + B)
        self.pos += B
        tau, tokens = self.tau[rows], self.tokens[rows]
        return BatchVerdict(tau, np.where(tau > 0, 0, -1), tokens, tau + 1, self._record(self.records[rows]))

    @staticmethod
    def _record(recs: list):
        if all(r is None for r in recs):
            return None
        if any(r == "malformed" for r in recs):
            return _Malformed()
        first = next(r for r in recs if r is not None)
        values = {name: np.array([r[name][r["row"]] if r is not None else (False if name == "active" else
                                  (1.0 if name == "rho" else -np.inf)) for r in recs]) for name in _RECORD_FIELDS}
        if any(r is not None and (r["kind"], r["K"]) != (first["kind"], first["K"]) for r in recs):
            return _Malformed()
        return BatchModification(first["kind"], first["K"], values["rho"], values["log_q_joint"],
                                 values["log_p_joint"], values["active"])


def certify_mixed(verifier, cases, n_samples: int, alpha: float, chunk: int = 4096, seed: int = 0,
                  progress=None) -> MixedRun:
    """Sample every FixedCase of ``cases`` in mixed batches (module doc) and test each against
    its own exact law.

    Args:
        verifier: an object with the batched contract (reference/contract.py).
        cases: FixedCase list (case j's rows get the seeds of case index j).
        n_samples: N per case (≥ 2; a case's ``samples_cap`` lowers its own).  alpha: per case.
        chunk: rows per call at most (``rows_per_call`` caps it by the lane's V).  seed: base seed.
        progress: called with each CaseResult, in the cases' order, when its lane is done.
    Returns:
        MixedRun.  A verifier that raises, or returns outputs that break the contract (τ or
        tokens of the wrong shape, τ outside [0, L], an id outside [0, V)), on a call stops the
        cases whose rows were in it: each fails its "verifier output" check with the error and
        the call's composition (a verdict, never an exception).
    Raises:
        ValueError: n_samples < 2, chunk < 1, a case that is not a FixedCase.
    """
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2 (the mean test needs two), got {n_samples!r}")
    if isinstance(chunk, bool) or int(chunk) != chunk or chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
    for case in cases:
        if not isinstance(case, FixedCase):
            raise ValueError(f"cases must hold FixedCase objects, got {type(case).__name__}")
    states = [_Case(j, c, min(int(n_samples), int(c.samples_cap or n_samples)), seed) for j, c in enumerate(cases)]
    lanes = _lanes(list(cases))
    rng = np.random.default_rng(CaseSeeds(seed, 0).node(MIX_STREAM))
    filler_rng = np.random.default_rng(CaseSeeds(seed, 0).node(FILLER_STREAM))
    for lane in lanes:
        lane.fillers = [f for f in (greedy_filler(cases[j]) for j in lane.main) if f is not None]
    # rows a large lane borrows from the small cases of its (K, L, dtype): a quarter of its mixed calls'
    # rows, at most a quarter of each small case's rows
    borrowed: dict[int, dict[int, int]] = {}
    for li, lane in enumerate(lanes):
        if lane.partners:
            share = max(1, sum(boundary_sizes(lane.V)) // 4 // len(lane.partners))
            borrowed[li] = {j: min(share, states[j].n // 4) for j in lane.partners}
    lent = {j: sum(b.get(j, 0) for b in borrowed.values()) for j in range(len(cases))}
    run = _Run(verifier, states, cases, rng, filler_rng)
    lines = []
    for li, lane in enumerate(lanes):
        small = lane.V <= SMALL_V
        quota = {j: states[j].n - (lent[j] if small else 0) for j in lane.main}
        quota.update(borrowed.get(li, {}))
        start = time.perf_counter()
        lines.append(run.lane(lane, quota, rows_per_call(chunk, lane.K, lane.L, lane.V), small))
        for j, q in quota.items():
            states[j].seconds += (time.perf_counter() - start) * (q / max(1, sum(quota.values())))
    results = []
    for st in states:
        results.append(_result(st, alpha, seed))
        if progress is not None:
            progress(results[-1])
    return MixedRun(results, run.outputs.results() + [run.greedy_check()], run.calls, lines)


class _Run:
    """The calls of one ``certify_mixed`` run: lanes, their calls, the checks over them."""

    def __init__(self, verifier, states, cases, rng, filler_rng):
        self.verifier, self.states, self.cases, self.rng, self.filler_rng = verifier, states, cases, rng, filler_rng
        self.outputs = OutputChecks("every call of the mixed batches")
        self.greedy = {"rows": 0, "bad": 0, "first": ""}
        self.calls = 0
        self.next = [0] * len(states)

    def lane(self, lane: _Lane, quota: dict, cap: int, small: bool) -> str:
        """Run one lane (module doc): a small lane's rows all in mixed calls; a large lane's first
        rows (``boundary_sizes(V)``) in mixed calls with the borrowed rows, the rest of its case in
        calls of its row repeated.  Returns the lane's line for the report."""
        members = list(quota)
        sources = [pad_rows(self.cases[j], lane.V) for j in members] + [
            (f.tokens,) + tuple(np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, lane.V - f.V)]) for a in (f.dp, f.tp))
            for f in lane.fillers]
        arrays = tuple(np.stack([src[i] for src in sources]) for i in range(3))
        labels = np.concatenate([np.full(q, m, dtype=np.int64) for m, q in enumerate(quota.values())])
        if small:
            mixed_rows, shared_rows = labels.size, 0
        else:
            main = quota[lane.main[0]]
            borrowed = labels.size - main
            mixed_rows = min(labels.size, sum(boundary_sizes(lane.V)))
            take_main = max(0, mixed_rows - borrowed)
            labels = np.concatenate([np.zeros(take_main, dtype=np.int64), labels[main:]])
            shared_rows = main - take_main
        order = self.rng.permutation(labels)
        pos, sizes = 0, []
        for size in call_sizes(mixed_rows, cap) if small else [s for s in boundary_sizes(lane.V) if s <= cap]:
            if pos >= order.size:
                break
            size = min(size, order.size - pos)
            sizes.append(size)
            self._mixed(lane, members, arrays, order[pos:pos + size])
            pos += size
        if pos < order.size:  # the boundary sizes did not take every borrowed row
            for size in call_sizes(order.size - pos, cap):
                sizes.append(size)
                self._mixed(lane, members, arrays, order[pos:pos + size])
                pos += size
        n_shared = 0
        if shared_rows:
            case = self.cases[lane.main[0]]
            rows = (case.draft_tokens, case.backend_draft_probs, case.backend_target_probs)
            for size in [cap] * (shared_rows // cap) + ([shared_rows % cap] if shared_rows % cap else []):
                n_shared += 1
                self._shared(lane, lane.main[0], rows, size)
        names = ", ".join(self.cases[j].name for j in members)
        line = (f"K={lane.K} L={lane.L} {lane.dtype} V={lane.V}: {names}"
                + (f" (+ {len(lane.fillers)} greedy)" if lane.fillers else "")
                + (f"; {len(sizes)} mixed calls of {min(sizes)}–{max(sizes)} rows" if sizes else ""))
        if n_shared:
            line += (f"; then {n_shared} calls of {self.cases[lane.main[0]].name!r} alone ({shared_rows} rows, its row "
                     "repeated: a verifier that evaluates a repeated row once keeps its speed there)")
        return line

    def _seeds(self, src: np.ndarray, members: list, n_members: int) -> np.ndarray:
        seeds = np.empty(src.size, dtype=np.int64)
        for m in np.unique(src[src < n_members]).tolist():
            st = self.states[members[m]]
            at = np.flatnonzero(src == m)
            seeds[at] = st.seeds[self.next[st.j]:self.next[st.j] + at.size]
            self.next[st.j] += at.size
        nf = int((src >= n_members).sum())
        if nf:
            seeds[src >= n_members] = self.filler_rng.integers(0, 2**63 - 1, nf, dtype=np.int64)
        return seeds

    def _mixed(self, lane: _Lane, members: list, arrays, take: np.ndarray) -> None:
        n_members = len(members)
        take = np.array([m for m in take.tolist() if self.states[members[m]].stopped is None], dtype=np.int64)
        if take.size == 0:
            return
        n_fill = (take.size // FILLER_EVERY + (take.size >= 2)) if lane.fillers else 0
        fill = self.filler_rng.integers(0, len(lane.fillers), n_fill) + n_members
        labels = np.concatenate([take, fill])
        src = labels[neighbour_order(labels, self.rng)]
        seeds = self._seeds(src, members, n_members)
        batch = tuple(a[src] for a in arrays)
        in_call = sorted({members[m] for m in src[src < n_members].tolist()})
        nf = int((src >= n_members).sum())
        where = (f"call {self.calls} (V = {lane.V}, {src.size} rows: " + ", ".join(self.cases[j].name for j in in_call)
                 + (f", {nf} greedy" if nf else "") + ")")
        outs, verdict = self._call(batch, seeds, lane, in_call, where)
        if outs is None:
            return
        for j in in_call:
            self._record(j, verdict, np.flatnonzero(src == members.index(j)), src.size)
        for r in np.flatnonzero(src >= n_members).tolist():
            f = lane.fillers[int(src[r]) - n_members]
            self.greedy["rows"] += 1
            tau, prefix, last = outs[r]
            if (tau, tuple(prefix) + (last,)) != (f.tau, f.emitted):
                self.greedy["bad"] += 1
                if not self.greedy["first"]:
                    self.greedy["first"] = (f"{where}, row {r} ({f.name}): τ = {tau}, tokens {list(prefix) + [last]}; "
                                            f"its one outcome: τ = {f.tau}, tokens {list(f.emitted)}")

    def _shared(self, lane: _Lane, j: int, rows, size: int) -> None:
        st = self.states[j]
        if st.stopped is not None:
            return
        batch = tuple(np.broadcast_to(a, (size,) + a.shape) for a in rows)
        seeds = st.seeds[self.next[j]:self.next[j] + size]
        self.next[j] += size
        outs, verdict = self._call(batch, seeds, lane, [j], f"call {self.calls} (V = {lane.V}, {size} rows of {st.case.name!r})")
        if outs is not None:
            self._record(j, verdict, np.arange(size), size)

    def _call(self, batch, seeds, lane: _Lane, in_call: list, where: str):
        self.calls += 1
        try:
            verdict = self.verifier(*batch, seeds=seeds)
            outs = verdict_outcomes(to_numpy(verdict.tau), to_numpy(verdict.tokens), lane.L, lane.V)
        except Exception as err:  # a defect of the verifier: the verdict of the cases in the call
            for j in in_call:
                st = self.states[j]
                if st.stopped is None:  # the first failing call is the one reported
                    st.stopped = (err, st.done, st.calls, where)
            return None, None
        self.outputs.add(verdict, batch, seeds, where)
        return outs, verdict

    def _record(self, j: int, verdict, rows_j: np.ndarray, B: int) -> None:
        """Keep what case j's rows ``rows_j`` of a call of B rows got: τ, tokens, the record."""
        st = self.states[j]
        st.calls += 1
        st.taus.append(np.asarray(to_numpy(verdict.tau)).astype(np.int64).reshape(-1)[rows_j])
        st.tokens.append(np.asarray(to_numpy(verdict.tokens)).astype(np.int64)[rows_j])
        st.records.append((rows_j, _record_rows(getattr(verdict, "modification", None), rows_j, B)))

    def greedy_check(self) -> SeedCheck:
        g = self.greedy
        if g["bad"]:
            return SeedCheck(GREEDY_CHECK, False, "greedy rows of the mixed batches", g["rows"], g["bad"], 0.0,
                             f"{g['bad']} of {g['rows']} greedy rows (T = 0: one-hot rows, one outcome) differ from "
                             f"their one outcome; first: {g['first']}")
        return SeedCheck(GREEDY_CHECK, True, "greedy rows of the mixed batches", g["rows"], 0, 0.0,
                         f"{g['rows']} greedy rows (T = 0: one-hot rows, one outcome) beside the sampled ones: each "
                         "its one outcome")


def _small_lane_of(lanes, j: int) -> int | None:
    for li, lane in enumerate(lanes):
        if j in lane.main and lane.V <= SMALL_V:
            return li
    return None


def _result(st: _Case, alpha: float, seed: int) -> CaseResult:
    """Case ``st``'s CaseResult: ``oracle.certify.certify_case`` on what its rows got
    (``_Replay``), its "verifier output" check naming the mixed calls (or the call that failed)."""
    start = time.perf_counter()
    result = certify_case(_Replay(st, st.case.L), st.case, st.n, alpha, st.n, seed, st.j)
    result.kind = "fixed drafts vs exact law, mixed batches"
    result.seconds = st.seconds + time.perf_counter() - start
    checks = []
    for name, ok, detail in result.checks:
        if name == "verifier output":
            if st.stopped is not None:
                err, done, _, where = st.stopped
                why = "broke the contract" if isinstance(err, ContractViolation) else "raised"
                detail = (f"the verifier {why} on {where} (after {done} of {st.n} of this case's rows): "
                          f"{type(err).__name__}: {err}")
            else:
                detail = f"{st.n} rows in {st.calls} calls of production batches, each within the contract"
        checks.append((name, ok, detail))
    result.checks = tuple(checks)
    return result


def check_batch(cases, seed: int):
    """The batch of the seed and batch checks of ``oracle.harness.certify_verifier``: rows of the
    expected-pass cases of the lane with the most small cases (V ≤ ``SMALL_V``; ties: the first
    case's lane), zero-padded to its V, dealt so that neighbours come from different cases
    (``neighbour_order``), at least ``CHECK_ROWS`` rows and enough that all rows coincide under
    fresh seeds with probability < 10^-12 (each row's coincidence c from its case's exact law).
    With no small case: the expected-pass case of smallest V alone, its row repeated (a
    zero-stride view) on ``LARGE_CHECK_ROWS`` = 64 rows (more where its law's coincidence needs
    them, at most what one call of ``oracle.certify.rows_per_call`` rows holds), each of its rows
    a call of K·(2L + 1)·V probabilities alone.

    Returns:
        (rows (draft_tokens, draft_probs, target_probs), collisions float [B] (per row), subject,
        rng: the Generator of the checks' own draws, max_rows: None or the most rows per call), or
        None when ``cases`` is empty.
    """
    from spectr_gbv.oracle.seed_contract import FALSE_ALARM, MAX_CHECK_ROWS, rows_needed

    cases = [c for c in cases if isinstance(c, FixedCase)]
    if not cases:
        return None
    pool = [c for c in cases if c.expect_pass] or cases
    lanes = [lane for lane in _lanes(pool) if lane.V <= SMALL_V]
    first = (pool[0].K, pool[0].L, str(pool[0].backend_draft_probs.dtype))
    if lanes:
        lane = max(lanes, key=lambda ln: (len(ln.main), (ln.K, ln.L, ln.dtype) == first))
        members = [pool[j] for j in lane.main]
        V = lane.V
    else:
        members = [min(pool, key=lambda c: c.V)]
        V = members[0].V
    c = [collision_probability(exact_verdict_law(get_rule(m.reference_rule), m.draft_tokens, m.draft_probs,
                                                 m.target_probs)) for m in members]
    rng = np.random.default_rng(CaseSeeds(seed, 0).node(CHECK_STREAM))
    B = CHECK_ROWS
    per_round = float(np.mean(np.log(np.clip(c, 1e-300, 1.0))))
    if per_round < 0:
        B = max(B, min(MAX_CHECK_ROWS, math.ceil(math.log(FALSE_ALARM) / per_round) + len(members)))
    if len(members) == 1 and members[0].V > SMALL_V:  # no small case: the largest-V fallback, kept small
        m = members[0]
        cap = rows_per_call(MAX_CHECK_ROWS, m.K, m.L, m.V)
        B = min(max(LARGE_CHECK_ROWS, rows_needed(c[0], at_least=LARGE_CHECK_ROWS, at_most=MAX_CHECK_ROWS) or 0),
                max(LARGE_CHECK_ROWS, 8 * cap // 9))
        rows = tuple(np.broadcast_to(a, (B,) + a.shape) for a in (m.draft_tokens, m.backend_draft_probs,
                                                                   m.backend_target_probs))
        return rows, np.full(B, c[0]), f"case {m.name!r}, its row repeated {B} times", rng, (cap if cap < B else None)
    labels = np.arange(B) % len(members)
    labels = labels[neighbour_order(labels, rng)]
    padded = [pad_rows(m, V) for m in members]
    rows = tuple(np.stack([padded[lab][i] for lab in labels.tolist()]) for i in range(3))
    subject = (f"{B} rows of {len(members)} cases, neighbours from different cases, padded to V = {V}: "
               + ", ".join(m.name for m in members))
    return rows, np.asarray(c)[labels], subject, rng, None
