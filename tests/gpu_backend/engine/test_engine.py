"""gpu_backend.engine.speculative wiring on small random transformers models (no downloads, seconds).

Two randomly initialised Llama models (V = 96, 2 layers) play draft and target; their output
heads are scaled up so that the rows are peaked, as a real model's are, and drafts are
rejected often enough to exercise every cache path (τ < L crops, τ = L leaves two pending
draft tokens, K > 1 rows are selected).
"""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.torch_backend import kv
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine, load_verifier  # noqa: E402
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities  # noqa: E402
from spectr_gbv.reference.draft_stopping import block_cap  # noqa: E402
from spectr_gbv.reference.rules import registry

from helpers.engine_models import (ALL_RULES, PROMPT, V, assert_one_hot_target_reproduces_greedy,  # noqa: E402,F401
                                    models, one_thread, perturbed, random_lm, run_recorded, uncached_row)


# -- the rows handed to the verifier ------------------------------------------------------

@pytest.mark.parametrize("rule,K,layout,share", [
    ("spectr", 3, "packed", True), ("spectr", 3, "packed", False), ("spectr", 3, "batched", True),
    ("kseq_gbv", 2, "packed", True), ("kseq_gbv", 2, "batched", True), ("sd", 1, "packed", True),
])
def test_verifier_rows_equal_uncached_model_calls(models, rule, K, layout, share):
    """Every draft row and raw target row equals a direct call of the model on the full
    prefix (context + draft prefix) without a cache, to 1e-5 (float32), in both cache
    layouts (K cache rows; one row with the drafts as a token tree, shared prefixes or not)."""
    target, draft = models
    sampling, draft_sampling = SamplingConfig(0.8), SamplingConfig(1.3)
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=sampling,
                               draft_sampling=draft_sampling, layout=layout,
                               share_prefixes=share)
    result, records = run_recorded(engine, 30, seed=3)
    taus = [r.verdict.tau[0].item() for r in records]
    # the cache paths: a crop (τ < L) and two pending draft tokens after a bonus (τ = L)
    assert min(taus) < 4 and max(taus) == 4, taus
    for rec in records:  # the last blocks are capped at the tokens still needed: S ≤ 4
        S = rec.draft_tokens.shape[1]
        for k in range(K):
            block = rec.draft_tokens[k].tolist()
            for i in range(S + 1):
                prefix = rec.context + block[:i]
                want_q = uncached_row(target, prefix, sampling)
                torch.testing.assert_close(rec.target_probs_raw[k, i], want_q, atol=1e-5, rtol=0)
                if i < S:
                    want_p = uncached_row(draft, prefix, draft_sampling)
                    torch.testing.assert_close(rec.draft_probs[k, i], want_p, atol=1e-5, rtol=0)
                    # the draft token was drawn from that very row
                    assert rec.draft_probs[k, i, block[i]] > 0
    assert result.target_calls == len(records)
    assert [t for rec in records for t in rec.emitted][: result.new_tokens] == result.tokens


def test_layouts_give_the_same_generation(models):
    """Same seed, same rows up to float rounding: the three layouts emit the same tokens."""
    target, draft = models
    outs = []
    for layout, share in (("batched", True), ("packed", False), ("packed", True)):
        engine = SpeculativeEngine(target, draft, rule="kseq_gbv", K=3, L=4,
                                   sampling=SamplingConfig(0.9), layout=layout,
                                   share_prefixes=share)
        outs.append(engine.generate(PROMPT, 30, seed=21))
    assert outs[0].tokens == outs[1].tokens == outs[2].tokens
    assert outs[0].taus == outs[1].taus == outs[2].taus


def test_packed_layout_with_eager_attention_matches_uncached():
    """The tree mask as an additive float mask (non-SDPA attention implementations)."""
    target = random_lm(1)
    target.config._attn_implementation = "eager"
    draft = perturbed(target, 2)
    sampling = SamplingConfig(1.0)
    engine = SpeculativeEngine(target, draft, rule="spectr", K=2, L=3, sampling=sampling)
    _, records = run_recorded(engine, 12, seed=1)
    for rec in records:
        for k in range(2):
            block = rec.draft_tokens[k].tolist()
            for i in range(len(block) + 1):  # S + 1 rows (S < 3 in capped last blocks)
                want = uncached_row(target, rec.context + block[:i], sampling)
                torch.testing.assert_close(rec.target_probs_raw[k, i], want, atol=1e-5, rtol=0)


def test_tree_shares_prefixes_and_builds_masks():
    from spectr_gbv.gpu_backend.decoding.tree import DraftTree

    tree = DraftTree(3)
    assert tree.add_depth([7, 7, 9]) == ([7, 9], [0, 0, 1])
    assert tree.add_depth([4, 5, 4]) == ([4, 5, 4], [2, 3, 4])
    assert tree.parent == [-1, -1, 0, 0, 1] and tree.depth_start == [0, 2, 5]
    assert tree.path(1, 2) == [0, 3] and tree.ancestors(4) == [4, 1]
    m = tree.mask(2, 5, prefix=3)[0, 0].int().tolist()
    assert m == [[1, 1, 1, 1, 0, 1, 0, 0],   # node 2: prefix, node 0, itself
                 [1, 1, 1, 1, 0, 0, 1, 0],   # node 3: prefix, node 0, itself
                 [1, 1, 1, 0, 1, 0, 0, 1]]   # node 4: prefix, node 1, itself
    flat = DraftTree(2, share_prefixes=False)
    assert flat.add_depth([7, 7]) == ([7, 7], [0, 1])


def test_keep_positions_gathers_a_path(models):
    target, _ = models
    with torch.inference_mode():
        cache = kv.new_cache(target)
        target(torch.tensor([PROMPT + [1, 2, 3, 4]]), cache=cache, use_cache=True)
        n = len(PROMPT)
        kv.keep_positions(cache, list(range(n)) + [n + 1, n + 3])  # keep tokens 2 and 4
        assert kv.cache_length(cache) == n + 2
        # the kept entries were computed at positions n+1, n+3: compare with a cache that
        # saw the same entries, i.e. gather the same positions from a fresh full cache
        full = kv.new_cache(target)
        target(torch.tensor([PROMPT + [1, 2, 3, 4]]), cache=full, use_cache=True)
        for a, b in zip(cache.layers, full.layers):
            torch.testing.assert_close(a.keys, b.keys[..., [*range(n), n + 1, n + 3], :])
        kv.keep_positions(cache, list(range(n)))  # a crop
        got = target(torch.tensor([[11]]), cache=cache, use_cache=True).logits[0, -1]
        want = target(torch.tensor([PROMPT + [11]])).logits[0, -1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="positions"):
        kv.keep_positions(cache, [3, 2])


def test_cache_widen_keep_row_matches_uncached(models):
    """kv.widen / kv.keep_row: after extending 3 rows differently and keeping row 1 cut
    back, the next logits equal an uncached forward on the kept prefix."""
    target, _ = models
    with torch.inference_mode():
        cache = kv.new_cache(target)
        target(torch.tensor([PROMPT]), cache=cache, use_cache=True)
        kv.widen(cache, 3)
        ext = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
        target(ext, cache=cache, use_cache=True)
        assert kv.cache_length(cache) == len(PROMPT) + 3
        kv.keep_row(cache, 1, 3, len(PROMPT) + 2)
        assert kv.cache_length(cache) == len(PROMPT) + 2
        got = target(torch.tensor([[11]]), cache=cache, use_cache=True).logits[0, -1]
        want = target(torch.tensor([PROMPT + [4, 5, 11]])).logits[0, -1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="row"):
        kv.keep_row(cache, 2, 1, 1)
    with pytest.raises(ValueError, match="length"):
        kv.keep_row(cache, 0, 1, 10_000)


# -- exact equality with autoregressive sampling ---------------------------------------------

@pytest.mark.parametrize("rule,K", ALL_RULES)
def test_one_hot_target_reproduces_autoregressive_output(models, rule, K):
    """Exact construction: the target is processed with top-k = 1, so every target row is
    one-hot on its argmax; the draft keeps a full distribution (T = 1.5), so drafts are often
    rejected.  A lossless rule must then emit the target's argmax at every position whatever
    its coins (any other token has target probability 0), and so do the released SpecTr-GBV
    variants (their acceptance and residual weights vanish off the target's support).  The
    output therefore equals plain sampling with top-k = 1 token for token, for any seed; a
    wrong cache row, crop or stack would change a target row and, soon, the argmax."""
    records = assert_one_hot_target_reproduces_greedy(*models, rule, K, 24)
    assert torch.all((records[0].target_probs_raw == 0) | (records[0].target_probs_raw == 1))
    # every block has the cap's length for the lossless rules, L for the released ones (the
    # engine's cap_blocks default); with these seeds the cap binds at the end, so both paths run
    lossless = registry.spec(rule).lossless
    for rec in records:
        assert rec.draft_tokens.shape[1] == (block_cap(rec.n, 24, 4) if lossless else 4)
    assert any(rec.draft_tokens.shape[1] < 4 for rec in records) == lossless


# -- reproducibility, stopping, metrics ------------------------------------------------------

def test_seeded_runs_are_reproducible(models):
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule="kseq_gbv", K=2, L=3,
                               sampling=SamplingConfig(0.9))
    a = engine.generate(PROMPT, 20, seed=11)
    b = engine.generate(PROMPT, 20, seed=11)
    c = engine.generate(PROMPT, 20, seed=12)
    assert a.tokens == b.tokens and a.taus == b.taus
    assert a.tokens != c.tokens
    x = autoregressive_generate(target, PROMPT, 20, SamplingConfig(0.9), seed=5)
    y = autoregressive_generate(target, PROMPT, 20, SamplingConfig(0.9), seed=5)
    assert x.tokens == y.tokens


@pytest.mark.parametrize("rule,K", [("gbv", 1), ("spectr", 2)])
def test_max_new_tokens_truncates_the_same_stream(models, rule, K):
    """Without the block cap the random stream does not depend on max_new_tokens: a short run
    is a prefix of a long one, cut exactly at the limit.  (With the cap, the default, the last
    blocks are shorter and draw less: test_block_cap.py.)"""
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=SamplingConfig(1.0),
                               cap_blocks=False)
    long = engine.generate(PROMPT, 30, seed=4)
    for n in (1, 6, 7, 13):
        short = engine.generate(PROMPT, n, seed=4)
        assert short.tokens == long.tokens[:n]
        assert short.new_tokens == n and short.stop_reason == "max_new_tokens"


def test_eos_stops_after_the_first_eos(models):
    target, draft = models
    sampling = SamplingConfig(1.0)
    free = SpeculativeEngine(target, draft, rule="bv", K=1, L=4, sampling=sampling)
    long = free.generate(PROMPT, 30, seed=9)
    eos = long.tokens[6]
    first = long.tokens.index(eos)
    stopping = SpeculativeEngine(target, draft, rule="bv", K=1, L=4, sampling=sampling,
                                 eos_token_ids=[eos])
    short = stopping.generate(PROMPT, 30, seed=9)
    assert short.tokens == long.tokens[: first + 1]
    assert short.stop_reason == "eos"
    ar_long = autoregressive_generate(target, PROMPT, 30, sampling, seed=9)
    eos_ar = ar_long.tokens[5]
    ar = autoregressive_generate(target, PROMPT, 30, sampling, seed=9, eos_token_ids=[eos_ar])
    assert ar.tokens == ar_long.tokens[: ar_long.tokens.index(eos_ar) + 1]
    assert ar.stop_reason == "eos"


def test_metrics_are_consistent(models):
    """The metrics' relations when every block has L positions (no cap, no stopping: the
    capped case is test_engine_block_cap.py's, Σ τ / Σ S)."""
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule="spectr", K=2, L=5, sampling=SamplingConfig(1.0),
                               cap_blocks=False)
    r = engine.generate(PROMPT, 40, seed=2)
    assert r.new_tokens == 40
    assert r.target_calls == len(r.taus)
    assert r.block_efficiency == pytest.approx(40 / len(r.taus))
    assert r.mean_accepted == pytest.approx(sum(r.taus) / len(r.taus))
    assert r.acceptance_rate == pytest.approx(r.mean_accepted / 5)
    acc = r.per_position_acceptance
    assert len(acc) == 5 and all(a >= b for a, b in zip(acc, acc[1:]))
    assert acc[0] == pytest.approx(sum(t >= 1 for t in r.taus) / len(r.taus))
    # E[τ] = Σ_i P(τ ≥ i)
    assert sum(acc) == pytest.approx(r.mean_accepted)
    # every iteration but the truncated last one emitted τ + 1 tokens
    assert sum(t + 1 for t in r.taus[:-1]) < 40 <= sum(t + 1 for t in r.taus)
    # τ counts kept draft tokens: only the truncated last iteration can differ from the raw τ
    assert r.taus[:-1] == r.taus_raw[:-1]
    last_kept = r.new_tokens - sum(t + 1 for t in r.taus[:-1])
    assert r.taus[-1] == min(r.taus_raw[-1], last_kept)
    assert r.peak_rss_bytes > 0 and r.wall_time_s > 0 and r.cpu_time_s > 0
    ar = autoregressive_generate(target, PROMPT, 12, SamplingConfig(1.0))
    assert ar.block_efficiency == 1.0 and ar.target_calls == 12


# -- errors ----------------------------------------------------------------------------------

def test_bad_arguments_raise_clear_errors(models):
    target, draft = models
    with pytest.raises(ValueError, match="K must"):
        SpeculativeEngine(target, draft, rule="spectr", K=0, L=3)
    with pytest.raises(ValueError, match="L must"):
        SpeculativeEngine(target, draft, rule="spectr", K=2, L=0)
    with pytest.raises(ValueError, match="single-draft"):
        SpeculativeEngine(target, draft, rule="bv", K=2, L=3)
    with pytest.raises(ValueError, match="unknown rule|nosuchrule"):
        SpeculativeEngine(target, draft, rule="nosuchrule", K=2, L=3)
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeEngine(target, random_lm(3, vocab=80), rule="sd", K=1, L=3)
    with pytest.raises(ValueError, match="layout"):
        SpeculativeEngine(target, draft, rule="sd", K=1, L=3, layout="tree")
    engine = SpeculativeEngine(target, draft, rule="sd", K=1, L=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate(PROMPT, 0)
    with pytest.raises(ValueError, match="prompt"):
        engine.generate([], 4)
    # temperature 0 is greedy (test_greedy_mode.py); 0 < T < 1e-4 is below the floor
    for kwargs, name in [({"temperature": 1e-5}, "temperature"), ({"temperature": -1.0}, "temperature"),
                         ({"temperature": float("nan")}, "temperature"),
                         ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
                         ({"top_k": -1}, "top_k")]:
        with pytest.raises(ValueError, match=name):
            SamplingConfig(**kwargs)


def test_load_verifier_rejects_unknown_rule():
    with pytest.raises(ValueError):
        load_verifier("nosuchrule")


# -- logits processing -----------------------------------------------------------------------

def test_probabilities_temperature_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0]]) + 1e-30)
    p = probabilities(logits, SamplingConfig(1.0))
    torch.testing.assert_close(p, torch.tensor([[0.5, 0.3, 0.2, 0.0]]), atol=1e-6, rtol=0)
    # temperature 0.5 squares the probabilities before renormalising
    p = probabilities(logits, SamplingConfig(0.5))
    torch.testing.assert_close(p, torch.tensor([[25, 9, 4, 0]]) / 38.0, atol=1e-6, rtol=0)
    p = probabilities(logits, SamplingConfig(1.0, top_k=2))
    torch.testing.assert_close(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]), atol=1e-6, rtol=0)
    # transformers' nucleus: drop the tail whose cumulative mass is ≤ 1 − top_p
    p = probabilities(logits, SamplingConfig(1.0, top_p=0.7))
    torch.testing.assert_close(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]), atol=1e-6, rtol=0)
    p = probabilities(logits, SamplingConfig(1.0, top_p=0.85))
    torch.testing.assert_close(p, torch.tensor([[0.5, 0.3, 0.2, 0.0]]), atol=1e-6, rtol=0)
    p = probabilities(logits.to(torch.bfloat16).expand(2, 3, 4), SamplingConfig(1.0, top_k=1))
    assert p.dtype == torch.float32 and p.shape == (2, 3, 4)
    assert torch.equal(p[..., 0], torch.ones(2, 3))


def test_sampling_config_generate_kwargs_turn_transformers_defaults_off():
    assert SamplingConfig(0.7).generate_kwargs() == {
        "do_sample": True, "temperature": 0.7, "top_k": 0, "top_p": 1.0}
    assert SamplingConfig(0.4, top_k=20, top_p=0.9).generate_kwargs()["top_k"] == 20
