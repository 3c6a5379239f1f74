"""Precision of the batched verifiers: float32 and bfloat16 inputs, L = 16 blocks of tiny
probabilities, and the Algorithm 2 weights computed from log joints.

Low-precision inputs.  float32 rows are used as given; bfloat16 rows are renormalised in float32
(gpu_backend/verifiers/inputs.py).  The reference is run on the values the backend sees, in
float64 (bfloat16: renormalised in float64), with the same noise through MarginSource, which
records how close the reference's own decisions were to a tie (min |u − h| over the coins asked,
gap between the two best race scores).  Where that margin is ≥ 1e-4 — far above the ~1e-6
relative error of float32 arithmetic — the outcomes must be identical; at least 90 % of the
cases must be decided so (the rest are counted, not compared).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from mpmath import mp, mpf

from spectr_gbv.gpu_backend.verifiers import VERIFIERS, get_verifier
from spectr_gbv.gpu_backend.verifiers.inputs import prepare
from spectr_gbv.reference.contract import BatchModification
from spectr_gbv.gpu_backend.verifiers.gbv import greedy_acceptance
from spectr_gbv.gpu_backend.verifiers.spectr_gbv import acceptance as spectr_gbv_acceptance
from spectr_gbv.reference.verdict import Modification
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)
from helpers.verifier_cases import (RULE_VARIANTS, SINGLE_DRAFT, MarginSource, case_options,
                                  random_noise, reference_rule, stack_cases, tree_case,
                                  variant_id, verdict_mismatch)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
MARGIN = 1e-4


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name,params", RULE_VARIANTS, ids=[variant_id(*v) for v in RULE_VARIANTS])
def test_low_precision_inputs_match_the_reference_away_from_ties(name, params, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{variant_id(name, params)}{dtype}".encode()))
    verifier, rule = get_verifier(name, **params), reference_rule(name, params)
    total = decided = 0
    for V, reps in ((5, 6), (4096, 2)):
        K = 1 if name in SINGLE_DRAFT else 3
        L = 3
        opts = case_options(name, V)
        if name in ("spectr", "kseq_gbv"):
            # p = q rows whose rounded sums miss 1 put ρ* on its rounding plateau (cases doc)
            opts["styles"] = ("random", "disjoint", "onehot", "tiny", "close")
        for _ in range(reps):
            cases = [tree_case(rng, V, K, L, **opts) for _ in range(8)]
            tok, dp64, tp64 = stack_cases(cases)
            dp_in, tp_in = dp64.to(DTYPES[dtype]), tp64.to(DTYPES[dtype])
            dp_ref, tp_ref = dp_in.double(), tp_in.double()
            if dtype == "bfloat16":
                dp_ref, tp_ref = dp_ref / dp_ref.sum(-1, keepdim=True), tp_ref / tp_ref.sum(-1, keepdim=True)
            U, E = random_noise(rng, len(cases), K, L, V)
            verdict = verifier(tok, dp_in, tp_in, noise=(torch.tensor(U), torch.tensor(E)))
            for b in range(len(cases)):
                src = MarginSource(U[b], E[b])
                ref = rule.verify(tok[b].numpy(), dp_ref[b].numpy(), tp_ref[b].numpy(), src)
                total += 1
                if src.margin < MARGIN:
                    continue
                decided += 1
                why = verdict_mismatch(verdict, b, ref, rtol=1e-5)
                assert why is None, f"V={V} row {b}: {why} (margin {src.margin:.3g})"
    assert decided >= 0.9 * total, (decided, total)


def tiny_block(V: int, K: int, L: int, ratio: float, p_token: float = 1e-25):
    """K drafts of L tokens whose draft probability is ``p_token`` each and target probability
    ``ratio``·p_token: block joints ~1e-400, below float64's range."""
    rng = np.random.default_rng(7)
    tokens = np.zeros((K, L), dtype=np.int64)
    dp = np.zeros((K, L, V))
    tp = np.zeros((K, L + 1, V))
    for k in range(K):
        for i in range(L):
            x = int(rng.integers(V))
            tokens[k, i] = x
            rest_p = rng.dirichlet(np.ones(V - 1))
            rest_q = rng.dirichlet(np.ones(V - 1))
            dp[k, i] = np.insert(rest_p * (1 - p_token), x, p_token)
            tp[k, i] = np.insert(rest_q * (1 - ratio * p_token), x, ratio * p_token)
        tp[k, L] = rng.dirichlet(np.ones(V))
    return tokens, dp, tp


def exact_gbv_h(tokens, dp, tp, k, rho=1):
    """GBV's h on draft k (docs/rules.md §2.4, q → q/ρ) in 60-digit arithmetic."""
    mp.dps = 60
    L = tokens.shape[1]
    pz = qz = mpf(1)
    h = []
    for i in range(1, L + 1):
        pz *= mpf(float(dp[k, i - 1, tokens[k, i - 1]]))
        qz *= mpf(float(tp[k, i - 1, tokens[k, i - 1]]))
        qs = qz / rho
        if i == L:
            h.append(min(mpf(1), qs / pz))
            break
        den = pz - sum(min(pz * mpf(float(a)), qs * mpf(float(b))) for a, b in zip(dp[k, i], tp[k, i]))
        h.append(1 - max(pz - qs, 0) / den if den > 0 else mpf(1))
    return np.array([float(min(1, max(0, x))) for x in h])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("ratio", [2.0, 0.5])
def test_L16_tiny_probabilities_do_not_underflow(dtype, ratio):
    V, K, L = 8, 2, 16
    tokens, dp, tp = tiny_block(V, K, L, ratio)
    tok = torch.tensor(tokens)[None].expand(64, K, L)
    dpt = torch.tensor(dp, dtype=dtype)[None].expand(64, K, L, V)
    tpt = torch.tensor(tp, dtype=dtype)[None].expand(64, K, L + 1, V)
    batch = prepare(tok[:1, :1], dpt[:1, :1], tpt[:1, :1])
    assert torch.isfinite(batch.lp).all() and float(batch.lp[0, 0, L]) < -900  # joint ~1e-400
    h = greedy_acceptance(batch, torch.ones(1, dtype=torch.float64))[0, 0, 1:].numpy()
    exact = exact_gbv_h(tokens, dp, tp, 0)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert np.abs(h - exact).max() <= tol, (h, exact)
    if ratio == 2.0:  # every prefix has q ≥ p: GBV accepts the whole block
        assert np.all(exact == 1.0)
    else:  # q(z)/p(z) = 2^-i: h is far from 1, which a float64 product (0/0) cannot see
        assert exact[:-1].max() < 0.9 and exact[-1] == 2.0 ** -L
    hs = spectr_gbv_acceptance(prepare(tok[:1], dpt[:1], tpt[:1]))[0, :, 1:].numpy()
    assert np.all(np.isfinite(hs)) and hs.max() <= 1e-4  # the released 1e-20 guard dominates
    for name in VERIFIERS:
        kk = 1 if name in SINGLE_DRAFT else K
        out = get_verifier(name)(tok[:, :kk], dpt[:, :kk], tpt[:, :kk], seeds=torch.arange(64))
        tau = out.tau
        assert ((tau >= 0) & (tau <= L)).all()
        emitted = out.tokens.gather(1, tau[:, None])
        assert ((emitted >= 0) & (emitted < V)).all()
        pos = torch.arange(L + 1)[None]
        assert (out.tokens[pos > tau[:, None]] == -1).all()
        if name in ("gbv", "kseq_gbv", "sd", "bv", "spectr") and ratio == 2.0:
            assert (tau == L).all(), name
        mod = out.modification
        if mod is not None:
            assert torch.isfinite(mod.rho).all()
            assert torch.isfinite(mod.log_q_joint[mod.active]).all()
            assert torch.isfinite(mod.log_p_joint[mod.active]).all()


def test_modification_weights_match_the_reference():
    rng = np.random.default_rng(3)
    q = rng.random(200) * (rng.random(200) < 0.8)
    p = rng.random(200) * (rng.random(200) < 0.8)
    q[:5], p[:5] = [0.3, 0.0, 0.2, 0.5, 0.0], [0.3, 0.4, 0.0, 0.1, 0.0]
    with np.errstate(divide="ignore"):
        lq, lp = torch.tensor(np.log(q))[None], torch.tensor(np.log(p))[None]
    for kind, K, rho in (("excess", 1, 1.0), ("excess", 3, 1.7), ("spectr_gbv", 2, 1.0), ("spectr_gbv", 5, 1.0)):
        ours = BatchModification(kind, K, torch.tensor([rho], dtype=torch.float64), lq[:, 0], lp[:, 0],
                                 torch.tensor([True]))
        ref = Modification(kind, K, rho, 0.0, 0.0).weights(q, p)
        w = ours.weights(lq, lp)[0].numpy()
        assert not np.isnan(w).any() and (w >= 0).all()
        np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-300)
        assert (w[ref == 0] == 0).all()


def test_modification_stack_rows_for_tiny_joints():
    """A window whose joints are e^-2000 (a long window of unlikely tokens; exp underflows):
    the stack shifts both log joints by one constant before w, which is homogeneous of degree
    1, so its modified rows equal the exact ones computed on the rescaled joints (1e-12)."""
    from spectr_gbv.gpu_backend.engine.stack import ModificationStack, Window
    from spectr_gbv.reference.contract import modification_weights

    q = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25] * 4, [0.25] * 4])
    p = np.array([[0.1, 0.5, 0.2, 0.2], [0.3, 0.3, 0.2, 0.2], [0.25] * 4])
    tokens = torch.tensor([[1, 2, 0]])
    for kind, K in (("excess", 1), ("spectr_gbv", 3)):
        mod = BatchModification(kind, K, torch.tensor([1.0], dtype=torch.float64),
                                torch.tensor([-2000.0]), torch.tensor([-2000.5]), torch.tensor([True]))
        stack = ModificationStack(3)
        stack.windows = [Window(0, 3, mod, -2000.0, -2000.5)]
        rows, trace = stack.modify(1, tokens, torch.tensor(p)[None], torch.tensor(q)[None])
        assert trace is not None and stack.rows_modified(1) == 2
        scale_p = np.exp(-0.5)  # the window's p/q joint ratio after the common shift
        for i, (qz, pz) in enumerate(((1.0, 1.0), (q[0, 1], p[0, 1]))):
            w = modification_weights(kind, K, 1.0, qz * q[i], scale_p * pz * p[i])
            np.testing.assert_allclose(rows[0, i].numpy(), w / w.sum(), rtol=1e-12, atol=0)
        np.testing.assert_array_equal(rows[0, 2:].numpy(), q[2:])  # past the window: raw rows


def exact_rho(p, q, k):
    """ρ* in 60-digit arithmetic (bisection to 2^-120 on the exact piecewise β)."""
    mp.dps = 60
    P = [mpf(float(x)) for x in p]
    Q = [mpf(float(x)) for x in q]

    def g(r):
        b = sum(min(a, c / r) for a, c in zip(P, Q))
        return 1 - (1 - b) ** k - r * b

    if sum(min(a, c) for a, c in zip(P, Q)) == 0 or g(mpf(1)) <= 0:
        return 1.0
    lo, hi = mpf(1), mpf(k)
    for _ in range(120):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if g(mid) <= 0 else (mid, hi)
    return float(hi)


def test_rho_star_matches_60_digit_arithmetic_and_the_reference():
    """Batched ρ* on well-conditioned random rows (V = 2..50, k = 2..8), nearly disjoint rows
    and the 4096-cell grid (V = 70,000): 60-digit root to 2e-10 (relative), reference to 2e-10
    where the reference is well conditioned."""
    from spectr_gbv.gpu_backend.verifiers.kseq import rho_star
    from spectr_gbv.reference.kseq import rho_star as reference_rho
    from helpers.verifier_cases import kseq_well_conditioned
    rng = np.random.default_rng(5)
    rows, ks = [], []
    while len(rows) < 60:
        V = int(rng.choice([2, 3, 4, 6, 50]))
        p = np.exp(rng.normal(size=V) * rng.uniform(0.2, 3))
        q = np.exp(rng.normal(size=V) * rng.uniform(0.2, 3))
        p, q = p / p.sum(), q / q.sum()
        if kseq_well_conditioned(p, q):
            rows.append((p, q))
            ks.append(int(rng.integers(2, 9)))
    for (p, q), k in zip(rows, ks):
        mine = float(rho_star(torch.tensor(p)[None], torch.tensor(q)[None], k)[0])
        assert abs(mine - exact_rho(p, q, k)) <= 2e-10 * mine
        assert abs(mine - reference_rho(p, q, k)) <= 2e-10 * mine
        assert mine >= 1.0 and mine <= k
    # nearly disjoint supports: 1 − (1 − β)^k must be computed without cancellation (both
    # backends use expm1/log1p forms)
    p, q = np.array([1 - 1e-9, 1e-9]), np.array([1e-9, 1 - 1e-9])
    mine = float(rho_star(torch.tensor(p)[None], torch.tensor(q)[None], 3)[0])
    exact = exact_rho(p, q, 3)
    assert abs(mine - exact) <= 1e-11 * exact and abs(reference_rho(p, q, 3) - exact) <= 1e-12 * exact
    # p ≈ q (all-reject probability ~1e-38): the root sits at max q/p = 1.00002; the reference
    # forms the valid side from positive parts when β ≥ 1/2 and finds it too (its old form,
    # 1 − (1 − β)^k ≤ ρβ, lost D^k under rounding and returned 1.00823)
    p, q = np.array([0.5, 0.5]), np.array([0.5 + 1e-5, 0.5 - 1e-5])
    mine = float(rho_star(torch.tensor(p)[None], torch.tensor(q)[None], 8)[0])
    assert abs(mine - 1.00002) <= 1e-9 and abs(reference_rho(p, q, 8) - 1.00002) <= 1e-9
    # the large-vocabulary grid (4096 cells, 3 passes), batched, float32 and float64
    V = 70_000
    g = torch.Generator().manual_seed(0)
    P = torch.softmax(torch.randn(3, V, generator=g, dtype=torch.float64) * 2, -1)
    Q = torch.softmax(torch.randn(3, V, generator=g, dtype=torch.float64) * 2, -1)
    k = torch.tensor([2, 5, 8])
    for dtype, tol in ((torch.float64, 2e-10), (torch.float32, 1e-6)):
        mine = rho_star(P.to(dtype), Q.to(dtype), k)
        for j in range(3):
            ref = reference_rho(P[j].to(dtype).double().numpy(), Q[j].to(dtype).double().numpy(), int(k[j]))
            assert abs(float(mine[j]) - ref) <= tol * ref, (dtype, j, float(mine[j]), ref)


def test_rho_star_at_the_real_vocabulary_with_most_tokens_outside_the_window():
    """V = 151,936, draft and target rows correlated as real models' are: after the first pass
    nearly every token falls outside the window and is binned into the dump cells
    (kseq.DUMP_CELLS per side); the root still matches the reference to 2e-10 (relative), and
    the dump cells lie below and above the window's cells D + 1 .. D + bins."""
    from spectr_gbv.gpu_backend.verifiers.kseq import DUMP_CELLS, _dump_bounds, rho_star
    from spectr_gbv.reference.kseq import rho_star as reference_rho

    V = 151_936
    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, V, generator=g, dtype=torch.float64) * 3
    P = torch.softmax(z + 0.5 * torch.randn(2, V, generator=g, dtype=torch.float64), -1)
    Q = torch.softmax(z, -1)
    for k in (2, 4):
        mine = rho_star(P, Q, k)
        for j in range(2):
            ref = reference_rho(P[j].numpy(), Q[j].numpy(), k)
            assert abs(float(mine[j]) - ref) <= 2e-10 * ref, (k, j, float(mine[j]), ref)
    low, high = _dump_bounds(V, 4096, torch.device("cpu"))
    assert low.min() == 0 and low.max() == DUMP_CELLS - 1
    assert high.min() == DUMP_CELLS + 4097 and high.max() == 2 * DUMP_CELLS + 4096


def test_single_candidate_rows_skip_the_passes_on_cpu_with_the_same_answer():
    """A batch mixing k ≤ 1 and k ≥ 2 rows (kseq._solve_some, CPU only): a k ≤ 1 row gets
    θ = 1/w and s = β(1/w) = Σ min(p, w·q) without the passes; a k ≥ 2 row gets what solving it
    alone (every row k ≥ 2: the fixed passes) gives, bit for bit."""
    from spectr_gbv.gpu_backend.verifiers.kseq import ratios, rho_star, threshold_scaled

    from spectr_gbv.gpu_backend.verifiers.kseq import LARGE_V

    rng = np.random.default_rng(11)
    P = rng.dirichlet(np.ones(LARGE_V), size=4)
    Q = rng.dirichlet(np.ones(LARGE_V), size=4)
    k = torch.tensor([1, 3, 0, 2])
    w = torch.tensor([0.5, 0.7, 1.0, 0.3], dtype=torch.float64)
    rows = ratios(torch.tensor(P), torch.tensor(Q))
    theta, s = threshold_scaled(*rows, k, w)
    for j in (0, 2):
        assert float(theta[j]) == pytest.approx(1 / float(w[j]), rel=1e-15)
        assert float(s[j]) == pytest.approx(np.minimum(P[j], float(w[j]) * Q[j]).sum(), abs=1e-14)
    for j in (1, 3):
        alone = threshold_scaled(*(r[j:j + 1] for r in rows), k[j:j + 1], w[j:j + 1])
        assert float(theta[j]) == float(alone[0][0]) and float(s[j]) == float(alone[1][0])
        assert float(theta[j]) > 1 / float(w[j])  # a real root, not the window's start
    rho = rho_star(torch.tensor(P), torch.tensor(Q), k)
    assert float(rho[0]) == 1.0 and float(rho[2]) == 1.0 and float(rho[1]) > 1.0
