"""certify log's fast record fields equal ``oracle.sequence_records.records_from_top``'s at T = 1
(to 1e-12), its precision reader equals ``reported_precision``, its streamed sums give the same
directional tests as ``family_test`` on the same records, and a truncation inside the list gives
the renormalised kept cells exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spectr_gbv.certify.topk_laws import SKIP_REASONS, reported_precisions, request_law
from spectr_gbv.certify.log.parse import Sample
from spectr_gbv.certify.log.run import chunk_records
from spectr_gbv.certify.log.tally import Tally, binned_ks_bound
from spectr_gbv.oracle.sequence_family import family_test
from spectr_gbv.oracle.sequence_records import records_from_top, reported_precision
from spectr_gbv.oracle.sequence_reports import report_tests


def _random_samples(rng, n_samples=40, n=12, V=50, k=8, style="float32"):
    """Samples with random top-k lists (T = 1, no truncation; every third sample's lists cover the
    whole law) and tokens drawn from the law."""
    out = []
    for s in range(n_samples):
        kk = V if s % 3 == 0 else k
        x, lpx, ids, lps, lens = [], [], [], [], []
        for t in range(n):
            p = rng.dirichlet(np.full(V, 0.3))
            top = np.argsort(-p)[:kk]
            lp = np.log(p[top])
            if style == "float32":
                lp = lp.astype(np.float32).astype(np.float64)
            elif style == "rounded":
                lp = np.round(lp, 3)
            perm = rng.permutation(kk)  # lists come in any order
            tok = int(rng.choice(V, p=p))
            x.append(tok)
            lpx.append(float(np.log(p[tok])))
            ids.extend(int(i) for i in top[perm])
            lps.extend(float(v) for v in lp[perm])
            lens.append(kk)
        out.append(Sample(s, 0, np.array(x), lpx, np.array(ids, dtype=np.int64), lps, lens, kk, 1.0, 0, 1.0, 0.0))
    return out


def _reference_records(samples):
    recs = []
    for s in samples:
        off = np.cumsum([0] + s.lens)
        top_ids = [s.ids[off[t]:off[t + 1]].tolist() for t in range(len(s.lens))]
        top_lps = [s.lps[off[t]:off[t + 1]] for t in range(len(s.lens))]
        recs.append(records_from_top(s.x, top_ids, top_lps, s.lpx))
    return recs


@pytest.mark.parametrize("style", ["float32", "rounded", "float64"])
def test_record_fields_equal_records_from_top_at_temperature_one(style):
    rng = np.random.default_rng(3)
    samples = _random_samples(rng, style=style)
    ra, line, choice, pos, sample_of, _ = chunk_records(samples, Tally())
    ref = [r for s in _reference_records(samples) for r in s]
    assert len(ref) == ra["c"].size == 480 and any("ox" in r for r in ref)
    for i, r in enumerate(ref):
        assert ra["k"][i] == r["k"] and ra["oc"][i] == r["oc"]
        assert ra["o"][i] == pytest.approx(r["o"], abs=1e-12)
        assert ra["pe"][i] == pytest.approx(r["pe"], abs=1e-12)
        assert ra["pr"][i] == pytest.approx(r["pr"], abs=1e-12)
        assert (ra["ox"][i] >= 0) == ("ox" in r) and (ra["ox"][i] == r.get("ox", -1))
        assert bool(ra["has_c"][i]) == ("c" in r)
        if "c" not in r:
            continue
        for key in ("c", "lo", "li", "tg", "tm", "tv"):
            assert ra[key][i] == pytest.approx(r[key], abs=1e-12), key
        np.testing.assert_allclose(ra["tk"][i], r["tk"], atol=1e-12)
        np.testing.assert_allclose(ra["tx"][i], r["tx"], atol=1e-12)
        np.testing.assert_allclose(ra["nu"][i], np.asarray(r["nu"], dtype=float), atol=1e-12)
        assert bool(ra["has_s"][i]) == ("se" in r)
        if "se" in r:
            for key in ("se", "sm", "sv", "sq"):
                np.testing.assert_allclose(ra[key][i], r[key], atol=1e-12, err_msg=key)


def test_precision_reader_equals_reported_precision():
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(300):
        v = -rng.exponential(3.0, 6)
        kind = rng.integers(4)
        rows.append(np.round(v, int(rng.integers(0, 7))) if kind == 0 else
                    v.astype(np.float32).astype(np.float64) if kind == 1 else v if kind == 2 else np.round(v, 9))
    L = np.array(rows)
    got = reported_precisions(L, np.ones(L.shape, dtype=bool))
    want = np.array([reported_precision(list(r)) for r in rows])
    np.testing.assert_array_equal(got, want)


def test_streamed_directional_tests_equal_family_test():
    """The tally's temperature, truncation, position-shift and other-cell results are family_test's
    and other_cell_test's on the same records (log W to 1e-9); its KS rows are the binned bound,
    within 1/B of the exact distance."""
    rng = np.random.default_rng(11)
    samples = _random_samples(rng, n_samples=60, n=10, V=16)
    t = Tally(alpha=1e-3, tolerance=1e-3, seed=0)
    ra, line, choice, pos, sample_of, _ = chunk_records(samples, t)
    t.add(ra, line, choice, pos, sample_of, len(samples))
    recs = _reference_records(samples)
    flat = [r for s in recs for r in s]
    reserved = t.reserved()  # look 1 (oracle.look_spending): the fixed-sample tests at alpha/2
    assert reserved == pytest.approx(1e-3 / 2 / 16, rel=1e-12)
    assert t.reserved(look=3) == pytest.approx(1e-3 / 12 / 16, rel=1e-12)
    fam = family_test(recs, 1e-3 / 2, 1e-3, reserved=reserved, directional_alpha=1e-3)
    mine = t.family()
    for a, b in zip(mine.directional, fam.directional):
        assert a.name == b.name and a.n == b.n
        assert a.statistic == pytest.approx(b.statistic, abs=1e-9)
        assert a.pvalue == pytest.approx(b.pvalue, rel=1e-9, abs=1e-300)
        assert a.detectable == pytest.approx(b.detectable, rel=1e-9)
    (mo,), (ro,) = t.reports(), report_tests(flat, reserved)
    assert mo.statistic == pytest.approx(ro.statistic, abs=1e-9) and mo.n == ro.n and mo.alpha == ro.alpha
    for a, b in zip(mine.rows, fam.rows):
        assert (a.scope, a.order, a.n, a.alpha) == (b.scope, b.order, b.n, pytest.approx(b.alpha))
    assert (mine.n_tokens, mine.n_sequences, mine.coarsened) == (fam.n_tokens, fam.n_sequences, fam.coarsened)
    # the binned KS distance bounds the exact one from above, within one bin
    u = rng.random(5000)
    n, D = binned_ks_bound(np.bincount((u * 4096).astype(int), minlength=4096))
    from scipy import stats
    exact = stats.kstest(u, "uniform").statistic
    assert n == 5000 and exact <= D <= exact + 2 / 4096


def _law(lps, beta=1.0, top_k=0, top_p=1.0, min_p=0.0, vocab=0, delta=1e-12):
    L = np.array([sorted(lps, reverse=True)])
    return request_law(L, np.array([L.shape[1]]), np.array([delta]), np.array([beta]), np.array([top_k]),
                       np.array([top_p]), np.array([min_p]), vocab, 1e-3)


def test_truncations_inside_the_list_are_exact_and_ambiguous_ones_skipped():
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])  # the whole law, listed
    lps = list(np.log(p))
    # top-k 3 at T = 1: the first three renormalised, no other cell
    law = _law(lps, top_k=3)
    np.testing.assert_allclose(law["P"][0, :3], p[:3] / p[:3].sum(), atol=1e-12)
    assert law["O"][0] == 0 and law["m"][0] == 3 and law["skip"][0] == 0
    # top-p 0.7 at T = 0.5 (β = 2): the nucleus of p² / Σ p², the list covers the law (o = 0)
    q = p ** 2 / (p ** 2).sum()
    size = int(np.searchsorted(np.cumsum(q), 0.7)) + 1
    law = _law(lps, beta=2.0, top_p=0.7)
    assert law["skip"][0] == 0 and law["m"][0] == size
    np.testing.assert_allclose(law["P"][0, :size], q[:size] / q[:size].sum(), atol=1e-9)
    # min-p 0.3 at T = 1: keep p >= 0.12
    law = _law(lps, min_p=0.3)
    assert law["m"][0] == 3 and law["skip"][0] == 0
    # a top-p boundary exactly at a cumulative mass within the precision: skipped
    law = _law(lps, top_p=0.65, delta=1e-3)
    assert SKIP_REASONS[law["skip"][0]].startswith("top-p boundary")
    # T > 1 with mass outside the list and no vocabulary: skipped; with V, bounded
    part = list(np.log(p[:4]))
    assert SKIP_REASONS[_law(part, beta=0.8)["skip"][0]].startswith("temperature > 1")
    law = _law(part, beta=0.8, vocab=6)
    assert law["pe"][0] > 0 and not math.isinf(law["pe"][0])


def test_an_e_value_far_below_one_is_p_one_not_an_overflow():
    """Seen on a 320,000-token log: the shift e-value's log W was below −709 and exp(−log W)
    overflowed (as ``sequence_scores.mixture_test`` still does)."""
    t = Tally()
    t.counts["n_s"] = t.counts["n_o"] = 10
    t.sums["s_e"][:] = -2000.0
    t.sums["o_f"][:] = -2000.0
    assert t._shift(1e-3).pvalue == 1.0
    assert t.reports()[0].pvalue == 1.0
