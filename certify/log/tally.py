"""The family's sufficient statistics over a log, streamed in bounded memory and mergeable.

``oracle.sequence_family.family_test`` holds every record; a log of 10^6 lines holds ~10^8 tokens.
Every member of the family is a sum over tokens, or a function of the PITs' empirical CDF:

- **temperature, position shift, truncation** (``oracle.sequence_scores``' e-values): sums per θ,
  λ and level of each token's log-factor and of the tolerance's penalty log(1 + η_t·…) (η fixed
  by the run: merging needs equal η), and the null means and variances ``detectable`` reads;
- **other cell** (``oracle.sequence_reports.other_cell_test``): sums per λ over the flagged tokens;
- **omnibus KS**: the PITs in ``POOLED_BINS`` equal bins per order (pooled) and ``POSITION_BINS``
  per order at each of the first ``MAX_POSITIONS`` positions.  The KS distance from bin counts
  is bounded, not exact: with C_i the PITs below the edge i/B, D ≤ max_i |C_i/n − i/B| + 1/B (the
  empirical CDF is monotone inside a bin and the uniform CDF moves 1/B), so the test uses that
  bound — conservative, and exact in size.  Positions ≥ ``MAX_POSITIONS`` are in the pooled rows
  only (the per-position rows' α is split over min(longest, ``MAX_POSITIONS``) positions).

So a tally of a shard is a small file (``to_json``; ~2 MB), tallies add (``merge``), and the
certificate of the merged tally is the one a single pass over the whole log gives: the PIT's
uniform of token t of choice c on line l is a hash of (seed, l, c, t), the same in any shard.
Not run: the independence test (it needs every sample of a prompt at once) and the reported
log-prob tests (the reference *is* the report).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.look_spending import look_alpha
from spectr_gbv.oracle.sequence_family import DIRECTIONAL, OMNIBUS_SHARE, FamilyResult
from spectr_gbv.oracle.sequence_records import LAMBDAS, LEVEL_NAMES, THETAS
from spectr_gbv.oracle.sequence_reports import OTHER_LAMBDAS, REPORT_SHARE
from spectr_gbv.oracle.sequence_scores import (TRUNCATION_LAMBDAS, TRUNCATION_WEIGHTS, DirectionalResult, e_value_p,
                                               mixture_detectable, temperature_detectable)
from spectr_gbv.oracle.sequence_test import ORDERS, SequenceRow, detectable_deviation

POOLED_BINS = 1 << 16
POSITION_BINS = 1 << 12
MAX_POSITIONS = 64
FORMAT = "spectr-gbv certify log tally 1"
_G, _L, _LV, _TL, _OL = len(THETAS), len(LAMBDAS), len(LEVEL_NAMES), len(TRUNCATION_LAMBDAS), len(OTHER_LAMBDAS)
# the sums, by name: shape
_SUMS = {"t_g": (), "t_k": (_G,), "t_pen": (_G,), "t_m": (), "t_v": (),
         "s_e": (_L,), "s_m": (_L,), "s_v": (_L,), "s_q": (_L,), "s_pen": (_L,),
         "u_f": (_LV, _TL), "u_pen": (_LV, _TL), "u_out": (_LV,), "u_m": (_LV,), "u_mm": (_LV,), "u_nlm": (_LV,),
         "o_f": (_OL,), "o_out": (), "o_o": (), "o_oo": ()}
_COUNTS = ("lines", "samples", "tokens", "records", "impossible", "n_t", "n_s", "n_u", "n_o", "o_zero_out")


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(seed: int, line, choice, pos) -> np.ndarray:
    """The PIT's uniforms of tokens (line, choice, position): float64 in [0, 1), a hash of (seed,
    line, choice, position), independent of the sampled tokens and the same in any shard."""
    with np.errstate(over="ignore"):
        key = np.uint64(int(seed) % (1 << 63) * 2 + 1) * np.uint64(0x9E3779B97F4A7C15)
        h = _mix64(np.asarray(line, dtype=np.uint64) + key)
        h = _mix64(h ^ (np.asarray(choice, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03)))
        h = _mix64(h + np.asarray(pos, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


class Tally:
    """The sums of a log or a shard of it (module doc).

    Args:
        alpha: the family's false-alarm rate; tolerance: η; seed: the PIT uniforms' seed.
        Those three must agree to merge.
    """

    def __init__(self, alpha: float = 1e-3, tolerance: float = 1e-3, seed: int = 0):
        self.alpha, self.tolerance, self.seed = float(alpha), float(tolerance), int(seed)
        self.sums = {k: np.zeros(s) for k, s in _SUMS.items()}
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.hist = np.zeros((len(ORDERS), POOLED_BINS), dtype=np.int64)
        self.pos_hist = np.zeros((MAX_POSITIONS, len(ORDERS), POSITION_BINS), dtype=np.int64)
        self.pe_max = 0.0
        self.pos_pe = np.zeros(MAX_POSITIONS)
        self.k_min = None
        self.o_min = math.inf
        self.lengths: Counter = Counter()  # records per sample
        self.skipped: Counter = Counter()  # samples skipped, by parse.SAMPLE_SKIPS key
        self.skipped_positions: Counter = Counter()  # positions skipped, by cells.SKIP_REASONS text
        self.temperatures: Counter = Counter()  # samples by the request's temperature
        self.ranges: list = []  # [[first line, last line + 1, source]] covered

    # -- accumulation -------------------------------------------------------------------------
    def add(self, ra: dict, line, choice, pos, sample_of, n_samples: int) -> None:
        """Add one chunk's record arrays (``cells.record_arrays``) of positions ``pos`` of the
        samples ``sample_of`` (0..n_samples − 1 in the chunk) at (``line``, ``choice``)."""
        eta = self.tolerance
        rec, has_c = ra["rec"], ra["has_c"]
        c = self.counts
        c["records"] += int(rec.sum())
        c["impossible"] += int(ra["imp"].sum())
        per = np.bincount(sample_of[rec], minlength=n_samples)
        self.lengths.update(int(v) for v in per if v > 0)
        c["samples"] += int(np.count_nonzero(per))
        if rec.any():
            self.pe_max = max(self.pe_max, float(ra["pe"][rec].max()))
            kmin = int(ra["k"][rec].min())
            self.k_min = kmin if self.k_min is None else min(self.k_min, kmin)
            p_in = rec & (pos < MAX_POSITIONS)
            np.maximum.at(self.pos_pe, pos[p_in], ra["pe"][p_in])
        idx = np.flatnonzero(has_c)
        if idx.size:
            u = uniforms(self.seed, line[idx], choice[idx], pos[idx])
            pp = pos[idx]
            near = pp < MAX_POSITIONS
            for oi, key in enumerate(("li", "lo")):  # ORDERS = ("id", "probability")
                pit = np.minimum(1.0, ra[key][idx] + u * ra["c"][idx])
                b = np.minimum((pit * POOLED_BINS).astype(np.int64), POOLED_BINS - 1)
                self.hist[oi] += np.bincount(b, minlength=POOLED_BINS)
                bp = np.minimum((pit[near] * POSITION_BINS).astype(np.int64), POSITION_BINS - 1)
                np.add.at(self.pos_hist, (pp[near], oi, bp), 1)
            self._scores(ra, idx, eta)
        flagged = rec & ~ra["imp"] & (ra["ox"] >= 0)
        if flagged.any():
            o, out = ra["o"][flagged], ra["ox"][flagged] == 1
            c["n_o"] += int(flagged.sum())
            c["o_zero_out"] += int((out & (o <= 0)).sum())
            self.o_min = min(self.o_min, float(o.min()))
            for a, lam in enumerate(OTHER_LAMBDAS):
                with np.errstate(divide="ignore"):
                    f = np.where(out, np.log((1 - lam) + lam / np.where(o > 0, o, 1.0)), math.log1p(-lam))
                self.sums["o_f"][a] += float(f[~(out & (o <= 0))].sum())
            self.sums["o_out"] += float(out.sum())
            self.sums["o_o"] += float(o.sum())
            self.sums["o_oo"] += float((o * (1 - o)).sum())

    def _scores(self, ra, idx, eta) -> None:
        s, c = self.sums, self.counts
        th = np.asarray(THETAS)[None, :]
        K, gx, pe = ra["tk"][idx], ra["tx"][idx], ra["pe"][idx]
        c["n_t"] += int(idx.size)
        s["t_g"] += float(ra["tg"][idx].sum())
        s["t_k"] += K.sum(axis=0)
        hi = np.exp(np.maximum(th * gx[:, :1], th * gx[:, 1:]) - K)
        lo = np.exp(np.minimum(th * gx[:, :1], th * gx[:, 1:]) - K)
        s["t_pen"] += np.log1p((eta + pe)[:, None] * (hi - lo)).sum(axis=0)
        s["t_m"] += float(ra["tm"][idx].sum())
        s["t_v"] += float(ra["tv"][idx].sum())
        sh = idx[ra["has_s"][idx]]
        if sh.size:
            c["n_s"] += int(sh.size)
            for key in ("e", "m", "v", "q"):
                s[f"s_{key}"] += ra[f"s{key}"][sh].sum(axis=0)
            rel = (1 + 2 * eta) * (1 + ra["pr"][sh]) - 1
            s["s_pen"] += np.array([float(np.log1p(lam * rel).sum()) for lam in LAMBDAS])
        nu = ra["nu"][idx]  # [n, levels, 2]
        c["n_u"] += int(idx.size)
        m = np.clip(nu[:, :, 0], 0.0, 1.0)
        inside = nu[:, :, 1] < 0.5
        M = np.maximum(1.0 - m, 1e-300)
        slack = np.minimum(1.0, M + (eta + pe)[:, None]) / M - 1.0
        for b, lam in enumerate(TRUNCATION_LAMBDAS):
            with np.errstate(divide="ignore"):
                f = np.log(np.where(inside, (1 - lam) + lam / M, 1 - lam))
            s["u_f"][:, b] += f.sum(axis=0)
            s["u_pen"][:, b] += np.log1p(lam * slack).sum(axis=0)
        s["u_out"] += (~inside).sum(axis=0)
        s["u_m"] += m.sum(axis=0)
        s["u_mm"] += (m * (1 - m)).sum(axis=0)
        s["u_nlm"] += (-np.log(M)).sum(axis=0)

    # -- merging and files ----------------------------------------------------------------------
    def merge(self, other: "Tally") -> "Tally":
        """Add ``other`` (a tally of other lines) into this one.

        Raises:
            ValueError: α, η or the seed differ, or the two cover a line in common.
        """
        for name in ("alpha", "tolerance", "seed"):
            if getattr(self, name) != getattr(other, name):
                raise ValueError(f"cannot merge tallies of different {name}: {getattr(self, name)!r} and "
                                 f"{getattr(other, name)!r} (run every shard with the same --{name})")
        for a in self.ranges:
            for b in other.ranges:
                if a[0] < b[1] and b[0] < a[1]:
                    raise ValueError(f"the shards overlap: lines {a[0]}..{a[1] - 1} ({a[2]}) and {b[0]}..{b[1] - 1} "
                                     f"({b[2]}); each line must be in one shard only (--lines, --first-line)")
        for k in self.sums:
            self.sums[k] = self.sums[k] + other.sums[k]
        for k in self.counts:
            self.counts[k] += other.counts[k]
        self.hist += other.hist
        self.pos_hist += other.pos_hist
        self.pe_max = max(self.pe_max, other.pe_max)
        self.pos_pe = np.maximum(self.pos_pe, other.pos_pe)
        if other.k_min is not None:
            self.k_min = other.k_min if self.k_min is None else min(self.k_min, other.k_min)
        self.o_min = min(self.o_min, other.o_min)
        for name in ("lengths", "skipped", "skipped_positions", "temperatures"):
            getattr(self, name).update(getattr(other, name))
        self.ranges = sorted(self.ranges + other.ranges)
        return self

    def to_json(self) -> dict:
        """The tally as a JSON-ready dict (histograms as sparse [index, count] pairs)."""
        def sparse(h):
            nz = np.flatnonzero(h)
            return [nz.tolist(), h.ravel()[nz].tolist()]

        return {"format": FORMAT, "alpha": self.alpha, "tolerance": self.tolerance, "seed": self.seed,
                "sums": {k: v.tolist() for k, v in self.sums.items()}, "counts": dict(self.counts),
                "hist": sparse(self.hist.ravel()), "pos_hist": sparse(self.pos_hist.ravel()),
                "pe_max": self.pe_max, "pos_pe": self.pos_pe.tolist(), "k_min": self.k_min,
                "o_min": None if not math.isfinite(self.o_min) else self.o_min,
                "lengths": {str(k): v for k, v in self.lengths.items()}, "skipped": dict(self.skipped),
                "skipped_positions": dict(self.skipped_positions),
                "temperatures": dict(self.temperatures), "ranges": self.ranges}

    @classmethod
    def from_json(cls, d: dict, what: str = "tally") -> "Tally":
        """A tally from ``to_json``'s dict.

        Raises:
            ValueError: not a tally of this format (``what`` names the file).
        """
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"{what} is not a certify log partial result (format {FORMAT!r})")
        t = cls(d["alpha"], d["tolerance"], d["seed"])
        for k in t.sums:
            t.sums[k] = np.asarray(d["sums"][k], dtype=np.float64).reshape(_SUMS[k])
        t.counts.update({k: int(v) for k, v in d["counts"].items()})
        for name in ("hist", "pos_hist"):
            arr = getattr(t, name).ravel()
            i, v = d[name]
            arr[np.asarray(i, dtype=np.int64)] = np.asarray(v, dtype=np.int64)
            setattr(t, name, arr.reshape(getattr(t, name).shape))
        t.pe_max, t.pos_pe = float(d["pe_max"]), np.asarray(d["pos_pe"], dtype=np.float64)
        t.k_min = d["k_min"]
        t.o_min = math.inf if d["o_min"] is None else float(d["o_min"])
        t.lengths = Counter({int(k): v for k, v in d["lengths"].items()})
        t.skipped, t.skipped_positions = Counter(d["skipped"]), Counter(d["skipped_positions"])
        t.temperatures = Counter(d["temperatures"])
        t.ranges = [list(r) for r in d["ranges"]]
        return t

    # -- the certificate ------------------------------------------------------------------------
    def reserved(self, extra: int = 0, look: int = 1) -> float:
        """The report tests' share: α_j·``REPORT_SHARE`` when any is planned (the other-cell test when
        any token is flagged, and ``extra`` more: the audit's log-prob shift test), else 0; α_j the
        fixed-sample share of the certificate's look ``look`` (``oracle.look_spending``)."""
        return look_alpha(self.alpha, look) * REPORT_SHARE if self.counts["n_o"] or extra else 0.0

    def report_alpha(self, extra: int = 0, look: int = 1) -> float:
        """Each report test's α: ``reserved`` split equally among those planned."""
        planned = int(bool(self.counts["n_o"])) + extra
        return self.reserved(extra, look) / planned if planned else 0.0

    def family(self, extra: int = 0, look: int = 1) -> FamilyResult | None:
        """The family's result (``FamilyResult``, as ``family_test`` gives it on the same records but
        for the binned KS bound), or None when no token was tested; ``extra``: report tests planned
        beside the other-cell test (their share is taken from the per-position rows); ``look``: the
        certificate's look (1, 2, …): the KS rows take α_j = α/(j(j+1)) of their share, the
        directional e-values their whole share at every look (``oracle.look_spending``)."""
        if not self.counts["records"]:
            return None
        alpha, eta = look_alpha(self.alpha, look), self.tolerance
        directional = tuple(d for d in DIRECTIONAL if d != "draft leak")
        reserved = self.reserved(extra, look)
        longest = max(self.lengths) if self.lengths else 0
        n_pos = min(longest, MAX_POSITIONS)
        a_omni = alpha * OMNIBUS_SHARE
        a_pooled = a_omni / 2 / len(ORDERS) if n_pos else (a_omni - reserved) / len(ORDERS)
        a_pos = (a_omni / 2 - reserved) / (n_pos * len(ORDERS)) if n_pos else 0.0
        rows = []
        for oi, o in enumerate(ORDERS):
            rows.append(_binned_ks("all", o, self.hist[oi], a_pooled, min(0.999, eta + self.pe_max)))
        for j in range(n_pos):
            for oi, o in enumerate(ORDERS):
                rows.append(_binned_ks(f"position {j}", o, self.pos_hist[j, oi], a_pos,
                                       min(0.999, eta + self.pos_pe[j])))
        a_dir = self.alpha * (1 - OMNIBUS_SHARE) / len(directional)
        dirs = (self._temperature(a_dir), self._truncation(a_dir), self._shift(a_dir))
        lengths = self.lengths
        early = sum(v for n, v in lengths.items() if n < longest)
        imp = self.counts["impossible"]
        passed = imp == 0 and all(r.passed for r in rows) and all(d.passed for d in dirs)
        return FamilyResult(tuple(rows), dirs, alpha, eta, self.counts["samples"], self.counts["records"], early, imp,
                            int(self.k_min or 0), passed,
                            next(r.detectable for r in rows if r.scope == "all" and r.order == "probability"))

    def _temperature(self, alpha: float) -> DirectionalResult:
        s, n = self.sums, self.counts["n_t"]
        unit = "|Δβ| (≈ |ΔT|/T)"
        if not n:
            return DirectionalResult("temperature", math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, 0, math.inf, unit,
                                     True)
        th = np.asarray(THETAS)
        log_w_th = th * s["t_g"] - s["t_k"] - s["t_pen"]
        log_w = _log_mean_exp(log_w_th)
        p = e_value_p(log_w)
        j = int(np.argmax(log_w_th))
        det = temperature_detectable(float(s["t_v"]), s["t_pen"], alpha)
        return DirectionalResult("temperature", float(log_w), p, n, float(s["t_g"]), float(s["t_m"]), float(s["t_v"]),
                                 float(s["t_pen"][j]), alpha, int(np.sign(THETAS[j])), float(det), unit, p >= alpha)

    def _shift(self, alpha: float) -> DirectionalResult:
        s, n = self.sums, self.counts["n_s"]
        name = "position shift"
        if not n:
            return DirectionalResult(name, math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, 1, math.inf, "weight ε", True)
        log_w = s["s_e"] - s["s_pen"]
        log_mean = _log_mean_exp(log_w)
        p = e_value_p(log_mean)
        j = int(np.argmax(log_w))
        det = mixture_detectable(n, s["s_m"], s["s_v"], s["s_q"], alpha, self.tolerance)
        return DirectionalResult(name, log_mean, p, n, float(s["s_e"][j]), float(s["s_m"][j]), float(s["s_v"][j]),
                                 float(s["s_pen"][j]), alpha, 1, det, "weight ε", p >= alpha)

    def truncation_levels(self) -> tuple:
        """``oracle.sequence_scores.truncation_levels`` for top-k lists: every top-p and min-p level,
        the top-k levels below the smallest list, and the top set."""
        k_min = self.k_min or 0
        return tuple(i for i, name in enumerate(LEVEL_NAMES)
                     if not name.startswith("top-k ") or int(name.split()[1]) < k_min)

    def _truncation(self, alpha: float) -> DirectionalResult:
        s, n = self.sums, self.counts["n_u"]
        unit = "level caught (1) or not (0)"
        levels = self.truncation_levels()
        if not n or not levels:
            return DirectionalResult("truncation", math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, -1, 0.0, unit, True)
        per_level = []
        for i in levels:
            terms = [math.log(w) + float(s["u_f"][i, b]) - float(s["u_pen"][i, b])
                     for b, w in enumerate(TRUNCATION_WEIGHTS)]
            per_level.append(_log_sum_exp(terms))
        log_w = _log_sum_exp(per_level) - math.log(len(levels))
        p = e_value_p(log_w)
        j = int(np.argmax(per_level))
        i = levels[j]
        pen = float(s["u_pen"][i, 0])
        full = float(s["u_nlm"][i]) - pen + math.log(TRUNCATION_WEIGHTS[0] / len(levels))
        return DirectionalResult(f"truncation ({LEVEL_NAMES[i]})", float(log_w), p, n, float(s["u_out"][i]),
                                 float(s["u_m"][i]), float(s["u_mm"][i]), pen, alpha, -1,
                                 float(full >= math.log(1 / alpha)), unit, p >= alpha)

    def reports(self, extra: int = 0, look: int = 1) -> tuple:
        """The other-cell test when planned, at ``report_alpha(extra, look)``."""
        n = self.counts["n_o"]
        if not n:
            return ()
        alpha = self.report_alpha(extra, look)
        s = self.sums
        if self.counts["o_zero_out"]:
            log_w = math.inf
        else:
            log_w = _log_mean_exp(s["o_f"])
        p = e_value_p(log_w)
        lam = OTHER_LAMBDAS[0]
        one = math.log((1 - lam) + lam / max(self.o_min, 1e-300)) + (n - 1) * math.log1p(-lam)
        return (DirectionalResult("reported top-k: other cell", float(log_w), p, n, float(s["o_out"]), float(s["o_o"]),
                                  float(s["o_oo"]), 0.0, alpha, 1,
                                  float(one - math.log(len(OTHER_LAMBDAS)) >= math.log(1 / alpha)),
                                  "tokens outside (caught: 1)", p >= alpha),)




def _log_sum_exp(values) -> float:
    v = np.asarray(values, dtype=np.float64)
    top = float(v.max())
    if top == -math.inf:
        return -math.inf
    if top == math.inf:
        return math.inf
    return top + math.log(float(np.exp(v - top).sum()))


def _log_mean_exp(values) -> float:
    return _log_sum_exp(values) - math.log(len(values))


def binned_ks_bound(counts: np.ndarray) -> tuple[int, float]:
    """(n, an upper bound on the KS distance to Uniform(0, 1)) of PITs given only their counts in
    equal bins of [0, 1) (module doc): max over the edges of |C_i/n − i/B| + 1/B."""
    n = int(counts.sum())
    if n == 0:
        return 0, math.nan
    B = counts.size
    cum = np.concatenate([[0], np.cumsum(counts)]) / n
    edges = np.arange(B + 1) / B
    return n, float(np.abs(cum - edges).max()) + 1.0 / B


def _binned_ks(scope, order, counts, alpha, eta) -> SequenceRow:
    n, D = binned_ks_bound(counts)
    if n == 0:
        return SequenceRow(scope, order, "KS", math.nan, 1.0, 0, alpha, math.inf, True)
    excess = min(1.0, D) - eta
    p = 1.0 if excess <= 0 else float(sps.kstwo.sf(excess, n))
    return SequenceRow(scope, order, "KS", min(1.0, D), p, n, alpha, detectable_deviation(n, alpha, eta), p >= alpha)
