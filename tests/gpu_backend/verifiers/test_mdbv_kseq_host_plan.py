"""MDBV-KSEQ's host plan (gpu_backend/verifiers/mdbv_kseq.py, ``_HostNodes``: on a CPU at
V ≥ kseq.LARGE_V, only the node solves the plan reads) against its fixed plan (every slot at
both budgets, no host read; what CUDA and the meta-device no-sync test run).

- The plans agree bit for bit on every node they define (budgets, ranks, liveness everywhere;
  coins, θ and ΣA/s on live nodes), and the verdicts under the same seeds are identical, at
  V = 600, K = 1..4, L = 1, 2, 4, float32 and bfloat16 rows, on batches whose drafts share
  prefixes of every length (peaked rows: the drafts often agree) and zero-probability tokens.
- The host plan solves what the module doc says: identical drafts take L solves, all with the
  K-SEQ root (SpecTr's count); drafts that differ at their first token take one root solve and
  4 + 2·(L − 2) one-candidate passes at K = 2; the fixed plan takes 1 + 2·K·(L − 1).
"""

from __future__ import annotations

import pytest
import torch

from spectr_gbv.gpu_backend.verifiers import get_verifier
from spectr_gbv.gpu_backend.verifiers import mdbv_kseq
from spectr_gbv.gpu_backend.verifiers.inputs import prepare

V = 600


def batch_rows(B, K, L, V, seed, dtype=torch.float32, zeros=0.02):
    """Peaked draft rows (the K drafts often agree), target rows near them, a share ``zeros``
    of zero probabilities."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(B, 1, L + 1, V, generator=g) * 4.0
    dp = torch.softmax(base[:, :, :L] + 0.5 * torch.randn(B, K, L, V, generator=g), dim=-1)
    dp = dp.where(torch.rand(B, K, L, V, generator=g) >= zeros, torch.zeros(()))
    dp = dp / dp.sum(-1, keepdim=True)
    tp = torch.softmax(base + 0.8 * torch.randn(B, K, L + 1, V, generator=g), dim=-1)
    tp = tp.where(torch.rand(B, K, L + 1, V, generator=g) >= zeros, torch.zeros(()))
    tp = tp / tp.sum(-1, keepdim=True)
    tok = torch.zeros(B, K, L, dtype=torch.int64)
    # drafts that share a prefix share the rows after it (one prefix, one context); each token
    # is drawn from its own draft's row
    for b in range(B):
        for i in range(L + 1):
            for k in range(1, K):
                for j in range(k):
                    if bool((tok[b, k, :i] == tok[b, j, :i]).all()):
                        if i < L:
                            dp[b, k, i] = dp[b, j, i]
                        tp[b, k, i] = tp[b, j, i]
                        break
            if i < L:
                tok[b, :, i] = torch.multinomial(dp[b, :, i], 1, generator=g)[:, 0]
    return tok, dp.to(dtype), tp.to(dtype)


CASES = [(K, L, seed) for K in (1, 2, 3, 4) for L in (1, 2, 4) for seed in (0, 1)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("K,L,seed", CASES)
def test_host_plan_equals_fixed_plan(K, L, seed, dtype):
    tok, dp, tp = batch_rows(6, K, L, V, seed, dtype)
    batch = prepare(tok, dp, tp, validate=True)
    assert mdbv_kseq.host_plan(batch)
    w, h, rank, live, theta, ratio, owner = mdbv_kseq.plan(batch, host=True)
    w0, h0, rank0, live0, theta0, ratio0, owner0 = mdbv_kseq.plan(batch, host=False)
    assert torch.equal(live, live0) and torch.equal(owner, owner0)
    assert torch.equal(w, w0)
    assert torch.equal(rank, rank0)
    for a, a0 in ((h, h0), (theta, theta0), (ratio, ratio0)):
        assert torch.equal(a[live], a0[live])
    # the batch is not vacuous: some nodes have several drafts, some rows rank two children
    if K > 1 and L > 1:
        assert bool((rank > 0).any())
        assert int(live.sum()) > K


@pytest.mark.parametrize("K,L,seed", [(2, 4, 0), (3, 4, 1), (4, 2, 0)])
def test_host_plan_verdicts_identical(K, L, seed, monkeypatch):
    tok, dp, tp = batch_rows(8, K, L, V, seed)
    verifier = get_verifier("mdbv_kseq")
    seeds = torch.arange(8, dtype=torch.int64) + 1000 * seed
    host = verifier(tok, dp, tp, seeds=seeds, validate=True)
    monkeypatch.setattr(mdbv_kseq, "host_plan", lambda batch: False)
    fixed = verifier(tok, dp, tp, seeds=seeds, validate=True)
    assert torch.equal(host.tau, fixed.tau)
    assert torch.equal(host.tokens, fixed.tokens)
    assert bool((host.tau < L).any()) and bool((host.tau > 0).any())


def count_solves(monkeypatch, tok, dp, tp, host):
    calls = {"root": 0, "single": 0, "rows": 0}
    real_threshold, real_single = mdbv_kseq.threshold_scaled, mdbv_kseq.single_candidate

    def threshold(p64, q64, t, k, w, **kw):
        calls["root"] += int((k > 1).sum())
        calls["rows"] += len(k)
        return real_threshold(p64, q64, t, k, w, **kw)

    def single(p64, q64, w=None, out=None):
        calls["single"] += p64.shape[0]
        calls["rows"] += p64.shape[0]
        return real_single(p64, q64, w, out=out)

    monkeypatch.setattr(mdbv_kseq, "threshold_scaled", threshold)
    monkeypatch.setattr(mdbv_kseq, "single_candidate", single)
    mdbv_kseq.plan(prepare(tok, dp, tp), host=host)
    monkeypatch.setattr(mdbv_kseq, "threshold_scaled", real_threshold)
    monkeypatch.setattr(mdbv_kseq, "single_candidate", real_single)
    return calls


@pytest.mark.parametrize("L", [2, 4, 6])
def test_solve_counts(L, monkeypatch):
    K = 2
    tok, dp, tp = batch_rows(1, K, L, V, 3, zeros=0.0)  # every drafted token has q > 0: all nodes live
    same = (tok[:, :1].expand(1, K, L).clone(), dp[:, :1].expand(1, K, L, V).clone(),
            tp[:, :1].expand(1, K, L + 1, V).clone())
    assert count_solves(monkeypatch, *same, host=True) == {"root": L, "single": 0, "rows": L}
    split = [x.clone() for x in (tok, dp, tp)]
    split[0][0, 1, 0] = (split[0][0, 0, 0] + 1) % V  # the drafts differ at their first token
    split[1][0, 1, 0] = split[1][0, 0, 0]  # one context at depth 0
    split[2][0, 1, 0] = split[2][0, 0, 0]
    host = count_solves(monkeypatch, *split, host=True)
    assert host == {"root": 1, "single": 4 + 2 * (L - 2), "rows": 1 + 4 + 2 * (L - 2)}
    fixed = count_solves(monkeypatch, *split, host=False)
    assert fixed["rows"] == 1 + 2 * K * (L - 1)


def test_host_plan_is_thread_safe():
    """Two threads planning different batches at one V get each batch's own plan (the host
    plan's float64 buffers are per thread)."""
    import threading

    batches = [prepare(*batch_rows(2, 3, 4, 4096, seed)) for seed in (0, 1)]
    expected = [mdbv_kseq.plan(b, host=True) for b in batches]
    bad = []

    def work(i):
        for _ in range(8):
            got = mdbv_kseq.plan(batches[i], host=True)
            bad.extend(j for j, (a, e) in enumerate(zip(got, expected[i])) if not torch.equal(a, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_host_ranks_equal_tensor_ranks():
    """The host plan's Python ranks (``_ranks_descending_host``) are ``_ranks_descending``'s on
    values with exact ties, ties within reference.ties' tolerance (chained), signed zeros and
    several groups per row."""
    g = torch.Generator().manual_seed(5)
    B, K = 400, 6
    base = torch.rand(B, K, generator=g, dtype=torch.float64)
    value = torch.where(torch.rand(B, K, generator=g) < 0.3, base[:, :1], base)  # exact ties
    near = torch.rand(B, K, generator=g) < 0.3
    value = torch.where(near, value[:, :1] * (1 + 1e-13), value)  # ties within tolerance
    value = torch.where(torch.rand(B, K, generator=g) < 0.1, torch.full_like(value, -0.0), value)
    key = torch.stack([torch.randperm(50, generator=g)[:K] for _ in range(B)])
    group = torch.randint(0, 3, (B, K), generator=g)
    host = mdbv_kseq._ranks_descending_host(value, key, group)
    assert torch.equal(host, mdbv_kseq._ranks_descending(value, key, group))
    assert int(host.max()) >= 3  # groups of several entries are ranked
