"""oracle/sequence_records.py: per-token records from whole and top-k laws, exact on small laws."""

import math

import numpy as np
import pytest

from spectr_gbv.oracle.sequence_records import (FLOAT32_LOGPROB_ERR, FLOAT64_LOGPROB_ERR, LAMBDAS, LEVEL_NAMES, LOG_FLOOR,
                                               THETAS, records_from_laws, records_from_top, reported_precision)

LAW = np.array([0.1, 0.4, 0.2, 0.3])  # probability order: 1, 3, 2, 0


def test_whole_law_record_values_are_exact():
    (r,) = records_from_laws([2], LAW[None, :])
    assert r["x"] == 2 and r["k"] == 4 and r["o"] == 0.0
    assert r["c"] == 0.2
    assert r["li"] == pytest.approx(0.1 + 0.4, abs=1e-15)  # ids 0, 1 before 2
    assert r["lo"] == pytest.approx(0.4 + 0.3, abs=1e-15)  # tokens 1, 3 more probable
    g = np.log(LAW)
    m = float((LAW * g).sum())
    assert r["tg"] == pytest.approx(math.log(0.2), abs=1e-15) and r["tm"] == pytest.approx(m, abs=1e-15)
    assert r["tv"] == pytest.approx(float((LAW * (g - m) ** 2).sum()), abs=1e-15)
    assert r["tr"] == pytest.approx(math.log(0.4) - math.log(0.1), abs=1e-15)
    # the temperature e-value's normaliser: K(θ) = log Σ p^{1+θ}, the range of g over the cells
    assert r["tk"] == pytest.approx([math.log(float((LAW ** (1 + th)).sum())) for th in THETAS], abs=1e-14)
    assert r["tx"] == pytest.approx([math.log(0.1), math.log(0.4)], abs=1e-15)
    # nuclei (rank of token 2 is 2): 0.9 → {1, 3, 2}: mass 0.9, out 0; 0.95 and 0.99 → all four; the
    # min-p sets hold all four (0.1 ≥ 0.1·0.4), the top-k sets too, the top set is a top-k law's only
    assert len(r["nu"]) == len(LEVEL_NAMES) == 10
    assert [o for _, o in r["nu"]] == [0] * 10
    assert [m for m, _ in r["nu"]] == pytest.approx([0.1] + [0.0] * 9, abs=1e-15)
    (r3,) = records_from_laws([0], LAW[None, :])  # the least probable token: outside the 0.9 nucleus only
    assert [o for _, o in r3["nu"]] == [1] + [0] * 9


def test_min_p_and_top_k_levels_of_a_whole_law():
    # 120 tokens: p ∝ 1/(rank+1); min-p 0.1 keeps ranks 0..9 (1/(r+1) ≥ 0.1), 0.05 ranks 0..19,
    # 0.02 ranks 0..49; top-k 20, 50 and 100 their ranks
    w = 1.0 / np.arange(1, 121)
    law = w / w.sum()
    (r,) = records_from_laws([30], law[None, :])  # rank 30
    names = dict(zip(LEVEL_NAMES, r["nu"]))
    for name, size in (("min-p 0.1", 10), ("min-p 0.05", 20), ("min-p 0.02", 50), ("top-k 20", 20),
                       ("top-k 50", 50), ("top-k 100", 100)):
        assert names[name][0] == pytest.approx(1 - law[:size].sum(), abs=1e-12), name
        assert names[name][1] == int(30 >= size), name
    assert names["top set"] == [0.0, 0]


def test_ties_are_ordered_by_id():
    law = np.array([0.25, 0.25, 0.5])
    r0, = records_from_laws([0], law[None, :])
    r1, = records_from_laws([1], law[None, :])
    assert (r0["lo"], r1["lo"]) == (0.5, 0.75)


def test_mixture_ratios_against_the_previous_law_and_a_draft():
    laws = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    draft = np.array([[1 / 3] * 3, [0.6, 0.2, 0.2]])
    r0, r1 = records_from_laws([0, 2], laws, draft)
    assert "se" not in r0 and "se" in r1 and len(r1["se"]) == len(LAMBDAS)
    r = np.array([0.5 / 0.2, 0.5 / 0.3, 0.0])
    for i, lam in enumerate(LAMBDAS):
        g = np.log((1 - lam) + lam * r)
        m = float((laws[1] * g).sum())
        assert r1["se"][i] == pytest.approx(g[2], abs=1e-15) and r1["sm"][i] == pytest.approx(m, abs=1e-15)
        assert r1["sv"][i] == pytest.approx(float((laws[1] * (g - m) ** 2).sum()), abs=1e-15)
        assert r1["sq"][i] == pytest.approx(float((laws[0] * g).sum()), abs=1e-15)
        gd = np.log((1 - lam) + lam * draft[1] / laws[1])
        assert r1["de"][i] == pytest.approx(gd[2], abs=1e-15)
        assert r1["dq"][i] == pytest.approx(float((draft[1] * gd).sum()), abs=1e-15)
        # a likelihood ratio: its exponential has mean 1 under the law it is taken against
        assert float((laws[1] * np.exp(g)).sum()) == pytest.approx(1.0, abs=1e-15)


def test_impossible_token_and_bad_laws():
    (r,) = records_from_laws([2], np.array([[0.5, 0.5, 0.0]]))
    assert r["imp"] and r["lp"] is None and "lo" not in r
    with pytest.raises(ValueError, match="outside the vocabulary"):
        records_from_laws([3], np.array([[0.5, 0.5, 0.0]]))
    with pytest.raises(ValueError, match="sums to"):
        records_from_laws([0], np.array([[0.5, 0.4]]))
    with pytest.raises(ValueError, match=r"\[n, V\]"):
        records_from_laws([0, 1], np.array([[0.5, 0.5]]))


# float64 log-probabilities: each top cell is the reported probability times e^−δ (the smallest the
# true one can be), "other" the rest (module doc: reported precision)
SHRINK = math.exp(-FLOAT64_LOGPROB_ERR)


def test_topk_cells_and_the_other_cell():
    ids, lps = [[7, 3, 9]], [[math.log(0.5), math.log(0.2), math.log(0.1)]]
    (inside,) = records_from_top([3], ids, lps)
    assert inside["k"] == 3 and inside["o"] == pytest.approx(1 - 0.8 * SHRINK, abs=1e-15)
    assert inside["c"] == pytest.approx(0.2 * SHRINK, abs=1e-15)
    assert inside["lo"] == pytest.approx(0.5 * SHRINK, abs=1e-15)
    assert inside["li"] == 0.0  # 3 is the smallest top id
    (outside,) = records_from_top([1], ids, lps, token_logprobs=[math.log(0.05)])
    assert outside["c"] == pytest.approx(1 - 0.8 * SHRINK, abs=1e-15)
    assert outside["lo"] == pytest.approx(0.8 * SHRINK, abs=1e-15)
    assert outside["li"] == pytest.approx(0.8 * SHRINK, abs=1e-15) and outside["lp"] == pytest.approx(math.log(0.05))
    # the temperature score's "other" cell takes the smallest top cell's log-probability
    assert outside["tg"] == pytest.approx(math.log(0.1 * SHRINK), abs=1e-15)
    cells = np.array([0.5 * SHRINK, 0.2 * SHRINK, 0.1 * SHRINK, 1 - 0.8 * SHRINK])
    g = np.log([0.5 * SHRINK, 0.2 * SHRINK, 0.1 * SHRINK, 0.1 * SHRINK])
    assert outside["tm"] == pytest.approx(float((cells * g).sum()), abs=1e-15)
    # the top set's count: "other" is outside it, with mass o
    assert outside["nu"][LEVEL_NAMES.index("top set")] == [pytest.approx(1 - 0.8 * SHRINK, abs=1e-15), 1]
    assert inside["nu"][LEVEL_NAMES.index("top set")][1] == 0
    # min-p 0.05 of a 3-cell list is not resolved (every cell above 0.05·0.5), min-p 0.1 neither; the
    # top-k levels are not smaller than the list: neutral entries
    assert inside["nu"][LEVEL_NAMES.index("min-p 0.1")] == [0.0, 0]
    assert inside["nu"][LEVEL_NAMES.index("top-k 20")] == [0.0, 0]
    # the precision's TV bound: Σ_top p·(e^δ − e^−δ)
    assert inside["pe"] == pytest.approx(0.8 * (math.exp(FLOAT64_LOGPROB_ERR) - SHRINK), rel=1e-6)
    assert "ox" not in inside  # "other" holds 0.2: far from claiming the whole law


def test_topk_order_of_the_input_does_not_matter_and_ties_go_by_id():
    a = records_from_top([5], [[5, 4]], [[math.log(0.3), math.log(0.3)]])[0]
    b = records_from_top([5], [[4, 5]], [[math.log(0.3), math.log(0.3)]])[0]
    assert a == b and a["lo"] == pytest.approx(0.3 * SHRINK, abs=1e-15)


def test_reported_precision_is_read_off_the_list():
    assert reported_precision([-0.69, -1.2, -3.0]) == pytest.approx(0.005 + FLOAT32_LOGPROB_ERR, rel=1e-12)
    assert reported_precision([-0.693, -1.204]) == pytest.approx(0.0005 + FLOAT32_LOGPROB_ERR, rel=1e-12)
    f32 = [float(np.float32(v)) for v in (-0.6931471805599453, -2.302585092994046)]
    assert reported_precision(f32) == FLOAT32_LOGPROB_ERR
    assert reported_precision([math.log(0.5), math.log(0.1)]) == FLOAT64_LOGPROB_ERR
    # a float32 list with one round entry (0.0: a near-certain token) stays float32, not 1 decimal
    assert reported_precision([0.0] + f32) == FLOAT32_LOGPROB_ERR


def test_a_rounded_list_summing_above_one_is_a_law_within_its_precision():
    """Log-probabilities rounded to 2 decimals: the top 3 of (0.5, 0.3, 0.2) sum to 1.0027 (refused
    before, above 1 + 1e-3).  Not an error and no zero "other" cell: o = 1 − 1.0027·e^−δ > 0."""
    lps = [round(math.log(p), 2) for p in (0.5, 0.3, 0.2)]
    total = float(np.exp(lps).sum())
    assert total > 1.0 + 2e-3
    delta = 0.005 + FLOAT32_LOGPROB_ERR
    (r,) = records_from_top([9], [[1, 2, 3]], [lps])  # a token outside the list
    assert not r.get("imp") and r["o"] == pytest.approx(1 - total * math.exp(-delta), abs=1e-15) and r["o"] > 0
    assert r["c"] == r["o"] and r["ox"] == 1 and r["pe"] == pytest.approx(total * (math.exp(delta) - math.exp(-delta)))
    (inside,) = records_from_top([1], [[1, 2, 3]], [lps])
    assert inside["ox"] == 0 and inside["c"] == pytest.approx(math.exp(lps[0] - delta), abs=1e-15)
    # far above 1 even at the precision: not a law
    with pytest.raises(ValueError, match="sum to"):
        records_from_top([1], [[1, 2]], [[-0.1, -0.1]])


def test_a_float32_top_list_never_makes_a_tail_token_impossible():
    """A float32 top-20 list of a law whose tail beyond the top 20 holds ~1e-7: its reported
    probabilities sum to ≥ 1 in a good share of rows (float32 rounding), where "other" used to be 0
    and a sampled tail token "impossible".  Now "other" is at least the precision's bound, and a
    tail token gets that cell (flagged ``ox``), never ``imp``."""
    rng = np.random.default_rng(3)
    V, rows, at_one, tail = 512, 200, 0, []
    for _ in range(rows):
        z = np.concatenate([rng.normal(0, 1, 20), np.full(V - 20, -19.0)])
        z32 = z.astype(np.float32)
        lp32 = z32 - np.float32(np.log(np.exp(z32.astype(np.float64)).sum()))  # float32 log-softmax
        ids = np.argsort(-lp32, kind="stable")[:20]
        lps = [float(v) for v in lp32[ids]]
        at_one += float(np.exp(np.array(lps)).sum()) >= 1.0
        (r,) = records_from_top([int(np.argsort(-lp32, kind="stable")[100])], [ids], [lps])
        tail.append(r)
    assert at_one >= 20  # the case that used to give "other" = 0
    assert not any(r.get("imp") for r in tail) and all(r["ox"] == 1 for r in tail)
    assert min(r["o"] for r in tail) >= 0.9 * FLOAT32_LOGPROB_ERR  # an upper bound on the true ~1e-7


def test_topk_inputs_refused():
    with pytest.raises(ValueError, match="twice"):
        records_from_top([1], [[1, 1]], [[-1.0, -2.0]])
    with pytest.raises(ValueError, match="sum to"):
        records_from_top([1], [[1, 2]], [[math.log(0.7), math.log(0.7)]])
    with pytest.raises(ValueError, match="finite"):
        records_from_top([1], [[1]], [[math.nan]])
    with pytest.raises(ValueError, match="one entry per token"):
        records_from_top([1, 2], [[1]], [[-1.0]])


def test_a_log_floor_bounds_the_score_range():
    law = np.array([1 - 1e-12, 1e-12])
    (r,) = records_from_laws([0], law[None, :])
    assert r["tr"] == pytest.approx(-LOG_FLOOR + math.log(1 - 1e-12), abs=1e-9)
