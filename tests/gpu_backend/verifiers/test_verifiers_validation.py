"""Input validation of the batched verifiers: every malformed input raises a ValueError that
names the argument; validate=False skips the value checks but still never returns a NaN or a
token id outside [-1, V)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spectr_gbv.gpu_backend.verifiers import VERIFIERS, get_verifier, verify
from spectr_gbv.gpu_backend.verifiers.inputs import ROW_SUM_ATOL
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)
from helpers.verifier_cases import SINGLE_DRAFT


def good(B=2, K=2, L=3, V=5, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    dp = torch.softmax(torch.randn(B, K, L, V, generator=g, dtype=torch.float64), -1)
    tp = torch.softmax(torch.randn(B, K, L + 1, V, generator=g, dtype=torch.float64), -1)
    tok = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K, L)
    return tok, dp.to(dtype), tp.to(dtype)


def run(tok, dp, tp, rule="kseq_gbv", **kw):
    return verify(rule, tok, dp, tp, seeds=torch.arange(tok.shape[0]) if tok.dim() == 3 else None, **kw)


def raises(match, tok, dp, tp, rule="kseq_gbv", **kw):
    with pytest.raises(ValueError, match=match):
        verify(rule, tok, dp, tp, **kw)


def test_good_inputs_pass():
    out = run(*good())
    assert out.tokens.shape == (2, 4)


def test_nan_inf_and_negative_rows():
    tok, dp, tp = good()
    bad = dp.clone()
    bad[1, 0, 2, 3] = float("nan")
    raises(r"draft_probs: contains NaN", tok, bad, tp)
    bad = tp.clone()
    bad[0, 1, 3, 0] = float("inf")
    raises(r"target_probs: contains NaN or infinite", tok, dp, bad)
    bad = tp.clone()
    bad[0, 0, 0, 1] = -0.01
    bad[0, 0, 0, 2] += 0.01
    raises(r"target_probs: contains negative", tok, dp, bad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_unnormalised_rows_by_dtype_tolerance(dtype):
    tok, dp, tp = good(dtype=torch.float64)
    atol = ROW_SUM_ATOL[dtype]
    assert atol == {torch.float64: 1e-5, torch.float32: 1e-4, torch.bfloat16: 1e-2}[dtype]
    off = tp.clone()
    off[1, 1, 2] *= 1 + 5 * atol  # row sum 1 + 5·atol: rejected
    raises(r"target_probs: probabilities are not normalised: row \(1, 1, 2\)", tok, dp.to(dtype), off.to(dtype))
    near = dp.clone()
    near[0, 0, 1] *= 1 + atol / 4  # within tolerance: accepted
    run(tok, near.to(dtype), tp.to(dtype))


def test_bfloat16_rows_that_miss_one_by_rounding_are_accepted():
    tok, dp, tp = good(V=300, dtype=torch.bfloat16)
    sums = tp.float().sum(-1)
    assert (sums - 1).abs().max() > 1e-4  # rounding to bfloat16 really moved the sums
    out = run(tok, dp, tp)
    assert ((out.tokens >= -1) & (out.tokens < 300)).all()


def test_all_zero_target_row():
    tok, dp, tp = good()
    bad = tp.clone()
    bad[0, 1, 3] = 0
    raises(r"target_probs: row \(0, 1, 3\) is all zero", tok, dp, bad)


def test_token_ids_out_of_range_and_zero_draft_probability():
    tok, dp, tp = good()
    bad = tok.clone()
    bad[1, 0, 2] = 5
    raises(r"draft_tokens\[1, 0, 2\] = 5 outside \[0, V\) with V = 5", bad, dp, tp)
    bad[1, 0, 2] = -1
    raises(r"draft_tokens\[1, 0, 2\] = -1 outside", bad, dp, tp)
    zero = dp.clone()
    x = int(tok[0, 1, 1])
    zero[0, 1, 1, x] = 0.0
    zero[0, 1, 1, (x + 1) % 5] += dp[0, 1, 1, x]
    raises(r"draft_tokens\[0, 1, 1\] = \d has draft probability 0", tok, zero, tp)


def test_shapes_vocabulary_K_L_and_dtypes():
    tok, dp, tp = good()
    raises(r"draft_tokens must have shape \[B, K, L\]", tok[0], dp, tp)
    raises(r"draft_probs must have shape \[B, K, L, V\] = \[2, 2, 3, V\]", tok, dp[:, :, :2], tp)
    raises(r"target_probs must have shape \[B, K, L\+1, V\] = \[2, 2, 4, V\]", tok, dp, tp[:, :, :3])
    raises(r"vocabulary mismatch: draft_probs has V = 5, target_probs has V = 4", tok, dp,
           tp[..., :4] / tp[..., :4].sum(-1, keepdim=True))
    raises(r"draft_tokens: K must be >= 1, got K = 0", tok[:, :0], dp[:, :0], tp[:, :0])
    raises(r"draft_tokens: L must be >= 1, got L = 0", tok[:, :, :0], dp[:, :, :0], tp[:, :, :1])
    raises(r"draft_tokens must hold integer token ids", tok.float(), dp, tp)
    raises(r"draft_probs: dtype torch.float16 not supported", tok, dp.half(), tp.half())
    raises(r"draft_probs \(torch.float32\) and target_probs \(torch.float64\) must have the same dtype",
           tok, dp, tp.double())
    raises(r"draft_probs must be a torch.Tensor or a numpy array, got list", tok, dp.tolist(), tp)
    raises(r"rule 'gbv' is single-draft: draft_tokens must have K = 1, got K = 2", tok, dp, tp, rule="gbv")


def test_numpy_inputs_are_the_same_contract():
    """numpy rows (as oracle.certify hands them) give the verdicts of the same tensors, and a
    zero-stride broadcast case is validated and verified like its materialised copy."""
    tok, dp, tp = good()
    seeds = torch.arange(2)
    for name in ("spectr", "kseq_gbv", "traversal"):
        verifier = get_verifier(name)
        a = verifier(tok, dp, tp, seeds=seeds)
        b = verifier(tok.numpy(), dp.numpy(), tp.numpy(), seeds=seeds.numpy())
        assert torch.equal(a.tau, b.tau) and torch.equal(a.tokens, b.tokens), name
        one = [np.broadcast_to(x[:1].numpy(), (6,) + tuple(x.shape[1:])) for x in (tok, dp, tp)]
        c = verifier(*one, seeds=np.arange(6))
        d = verifier(*(np.array(x) for x in one), seeds=np.arange(6))
        assert torch.equal(c.tau, d.tau) and torch.equal(c.tokens, d.tokens), name
    bad = dp.numpy().copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"draft_probs: contains NaN"):
        get_verifier("spectr")(np.broadcast_to(tok[:1].numpy(), (4, 2, 3)),
                           np.broadcast_to(bad[:1], (4,) + bad.shape[1:]),
                           np.broadcast_to(tp[:1].numpy(), (4,) + tuple(tp.shape[1:])))


def test_seeds_and_noise_arguments():
    tok, dp, tp = good()
    raises(r"seeds must have shape \[B\] = \[2\]", tok, dp, tp, seeds=torch.arange(3))
    raises(r"seeds must be integers", tok, dp, tp, seeds=torch.tensor([0.5, 1.5]))
    U = torch.rand(2, 2, 4) * 0.9 + 0.05
    E = torch.ones(2, 5)
    verify("kseq_gbv", tok, dp, tp, noise=(U, E))
    raises(r"noise: uniforms must have shape \[B, K, L\+1\] = \[2, 2, 4\]", tok, dp, tp, noise=(U[:, :, :3], E))
    raises(r"noise: exponentials must have shape \[B, V\] = \[2, 5\]", tok, dp, tp, noise=(U, E[:, :4]))
    raises(r"noise: uniforms must lie in \(0, 1\]", tok, dp, tp, noise=(U * 0, E))
    raises(r"noise: exponentials must be finite and > 0", tok, dp, tp, noise=(U, E * 0))
    raises(r"noise must be a pair", tok, dp, tp, noise=U)


def test_registry_errors():
    with pytest.raises(ValueError, match=r"unknown rule 'nope'; known rules: sd, spectr"):
        get_verifier("nope")
    with pytest.raises(ValueError, match=r"rule 'sd' takes parameters none, got \['algorithm2'\]"):
        get_verifier("sd", algorithm2=False)
    with pytest.raises(ValueError, match=r"residual must be one of"):
        get_verifier("spectr_gbv", residual="other")
    assert get_verifier("spectr_gbv", residual="consistent").residual == "consistent"
    assert get_verifier("gbv", algorithm2=False).modifies_targets is False
    assert get_verifier("spectr_gbv_fixed").algorithm2 and get_verifier("spectr_gbv_fixed").residual == "consistent"


@pytest.mark.parametrize("name", VERIFIERS)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_unvalidated_garbage_never_gives_nan_or_bad_ids(name, data):
    """validate=False on NaN/negative/zero/unnormalised rows and zero-probability draft tokens:
    τ ∈ [0, L], ids in [0, V) then -1 padding, finite ρ; the joints are NaN-free unless the
    input itself holds NaN or negative probabilities (their logarithm)."""
    K = 1 if name in SINGLE_DRAFT else data.draw(st.integers(1, 3))
    L = data.draw(st.integers(1, 4))
    V = data.draw(st.integers(2, 6))
    B = 3
    seed = data.draw(st.integers(0, 2**31))
    g = torch.Generator().manual_seed(seed)
    dp = torch.rand(B, K, L, V, generator=g)
    tp = torch.rand(B, K, L + 1, V, generator=g)
    mode = data.draw(st.sampled_from(["nan", "negative", "zeros", "unnormalised", "onehot"]))
    if mode == "nan":
        dp[0, 0, 0, 0] = float("nan")
        tp[1, -1, -1, -1] = float("nan")
    elif mode == "negative":
        dp -= 0.5
        tp -= 0.5
    elif mode == "zeros":
        dp.zero_()
        tp[:, :, ::2] = 0
    elif mode == "unnormalised":
        dp *= 7
    else:
        dp = torch.nn.functional.one_hot(torch.randint(0, V, (B, K, L), generator=g), V).float()
        tp = torch.nn.functional.one_hot(torch.randint(0, V, (B, K, L + 1), generator=g), V).float()
    tok = torch.randint(0, V, (B, K, L), generator=g)
    out = get_verifier(name)(tok, dp, tp, seeds=torch.arange(B), validate=False)
    assert ((out.tau >= 0) & (out.tau <= L)).all()
    pos = torch.arange(L + 1)[None]
    inside = pos <= out.tau[:, None]
    assert ((out.tokens[inside] >= 0) & (out.tokens[inside] < V)).all()
    assert (out.tokens[~inside] == -1).all()
    assert (out.num_emitted == out.tau + 1).all()
    mod = out.modification
    if mod is not None and mode not in ("nan", "negative"):  # log of NaN/negative input is NaN
        for f in (mod.rho, mod.log_q_joint, mod.log_p_joint):
            assert not torch.isnan(f).any()
    if mod is not None:
        assert torch.isfinite(mod.rho).all()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_small_integer_token_dtypes_are_compared_in_int64(dtype):
    """V = 600 does not fit uint8 or int8: the range check must not wrap it (600 → 88)."""
    V = 600
    dp = torch.full((1, 2, 1, V), 1.0 / V, dtype=torch.float64)
    tp = torch.full((1, 2, 2, V), 1.0 / V, dtype=torch.float64)
    tok = torch.full((1, 2, 1), 100, dtype=dtype)
    out = run(tok, dp, tp, rule="spectr")
    assert out.tau.shape == (1,) and 0 <= int(out.tau[0]) <= 1
    if dtype != torch.uint8:
        raises(r"draft_tokens\[0, 0, 0\] = -3 outside \[0, V\) with V = 600", torch.full((1, 2, 1), -3, dtype=dtype), dp, tp)


@pytest.mark.parametrize("rule", ["spectr", "mdbv_kseq", "bv"])
def test_inputs_that_require_grad_are_verified(rule):
    K = 1 if rule == "bv" else 2
    tok, dp, tp = good(K=K, V=600)
    out = run(tok, dp.clone().requires_grad_(True), tp.clone().requires_grad_(True), rule=rule)
    ref = run(tok, dp, tp, rule=rule)
    assert torch.equal(out.tau, ref.tau) and torch.equal(out.tokens, ref.tokens)
