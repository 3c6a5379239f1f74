"""What the engine refuses or raises, its seeds, and its metric definitions.

Small random transformers models built from configs (no downloads, seconds): models whose cache
cannot be cut back are refused at construction; NaN logits raise, naming the model, instead of
becoming tokens; every integer seed is its own stream; τ counts the draft tokens a generation
returns, for the engine and for transformers' assisted generation alike.
"""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.torch_backend import kv
from spectr_gbv.gpu_backend.bench.assisted import assisted_generate  # noqa: E402
from spectr_gbv.gpu_backend.engine.inputs import NonFiniteError  # noqa: E402
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate  # noqa: E402
from spectr_gbv.reference.seeds import generator_seed  # noqa: E402
from spectr_gbv.gpu_backend.torch_backend.backend import check_model  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities  # noqa: E402

from helpers.engine_models import PROMPT, V, models, one_thread, perturbed, random_lm  # noqa: E402,F401  (fixtures)

SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)


def mistral(sliding_window: int, max_positions: int = 512):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(5)
    cfg = MistralConfig(**SMALL, sliding_window=sliding_window,
                        max_position_embeddings=max_positions)
    return MistralForCausalLM(cfg).eval()


# -- refusals at construction ----------------------------------------------------------------

def test_sliding_window_target_or_draft_is_refused(models):
    """A window smaller than prompt + block crashed at the first cut-back (crop) and the
    packed tree mask ignored it: refused at construction, naming the model."""
    target, draft = models
    sliding = mistral(sliding_window=4)
    for layout in ("packed", "batched"):
        with pytest.raises(ValueError, match=r"^target model \(MistralForCausalLM\).*sliding window"):
            SpeculativeEngine(sliding, draft, rule="sd", K=1, L=3, layout=layout)
        with pytest.raises(ValueError, match=r"^draft model \(MistralForCausalLM\).*sliding window"):
            SpeculativeEngine(target, sliding, rule="sd", K=1, L=3, layout=layout)
    # even a long window is refused when a generation could outgrow it
    with pytest.raises(ValueError, match="draft model.*sliding window.*4096 < max_position"):
        SpeculativeEngine(target, mistral(4096, 8192), rule="sd", K=1, L=3)


def test_a_window_that_never_binds_is_accepted_and_exact():
    """sliding_window ≥ max_position_embeddings: transformers builds sliding cache layers,
    but the window can never drop a position, so the engine's rows equal uncached calls."""
    target = mistral(sliding_window=256, max_positions=256)
    draft = perturbed(target, 3)
    sampling = SamplingConfig(1.0)
    for layout in ("packed", "batched"):
        engine = SpeculativeEngine(target, draft, rule="spectr", K=2, L=3, sampling=sampling,
                                   layout=layout)
        records = []
        engine.generate(PROMPT, 10, seed=1, on_iteration=records.append)
        with torch.inference_mode():
            for rec in records:
                for k in range(2):
                    block = rec.draft_tokens[k].tolist()
                    for i in range(len(block) + 1):  # S + 1 rows, S < 3 in capped last blocks
                        logits = target(torch.tensor([rec.context + block[:i]])).logits[0, -1]
                        torch.testing.assert_close(rec.target_probs_raw[k, i],
                                                   probabilities(logits, sampling),
                                                   atol=1e-5, rtol=0)
    # beyond max_position_embeddings the window would bind: refused per generation
    with pytest.raises(ValueError, match=r"target model's sliding window \(256\) is too short"):
        engine.generate(PROMPT, 256 - len(PROMPT) - 6, seed=1)


def test_recurrent_and_hybrid_caches_are_refused(models):
    from transformers import Lfm2Config, Lfm2ForCausalLM, MambaConfig, MambaForCausalLM

    target, _ = models
    torch.manual_seed(0)
    lfm2 = Lfm2ForCausalLM(Lfm2Config(**SMALL, full_attn_idxs=[1])).eval()
    with pytest.raises(ValueError, match=r"^draft model \(Lfm2ForCausalLM\).*layer 0 .*recurrent"):
        SpeculativeEngine(target, lfm2, rule="sd", K=1, L=3)
    with pytest.raises(ValueError, match=r"^target model \(Lfm2ForCausalLM\).*convolution"):
        check_model(lfm2, "target")
    mamba = MambaForCausalLM(MambaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2)).eval()
    with pytest.raises(ValueError, match=r"^target model \(MambaForCausalLM\).*stateful"):
        SpeculativeEngine(mamba, target, rule="sd", K=1, L=3)
    # the detection on configs alone
    assert "recurrent" in kv.rollback_problem(MambaConfig(vocab_size=V, hidden_size=32,
                                                          num_hidden_layers=2))
    assert "stateful" in kv.rollback_problem(target.config, stateful=True)


def test_models_with_full_caches_are_accepted(models):
    """Qwen2 configs carry sliding_window with use_sliding_window=False: transformers builds
    full layers, and so the engine accepts them (as Llama / SmolLM2)."""
    from transformers import Qwen2Config

    target, draft = models
    assert kv.rollback_problem(target.config) is None
    qwen = Qwen2Config(**SMALL)
    assert kv.rollback_problem(qwen) is None
    assert "sliding window" in kv.rollback_problem(Qwen2Config(**SMALL, use_sliding_window=True,
                                                               sliding_window=16,
                                                               max_window_layers=0))
    SpeculativeEngine(target, draft, rule="sd", K=1, L=3)


# -- non-finite logits -----------------------------------------------------------------------

def nan_model(seed: int, when=lambda seq_len: True, value=float("nan")):
    """A random model whose logits get ``value`` at token 0 in every call whose number of
    input tokens satisfies ``when`` (a forward hook on the model)."""
    model = random_lm(seed)

    def hook(module, args, kwargs, output):
        ids = args[0] if args else kwargs["input_ids"]
        if when(ids.shape[1]):
            logits = output.logits.clone()
            logits[..., 0] = value
            output.logits = logits
        return output

    model.register_forward_hook(hook, with_kwargs=True)
    return model


@pytest.mark.parametrize("rule,K", [("sd", 1), ("bv", 1), ("kseq_gbv", 2), ("spectr", 2)])
@pytest.mark.parametrize("layout", ["packed", "batched"])
def test_nan_logits_raise_naming_the_model(rule, K, layout):
    target = random_lm(1)
    draft = perturbed(target, 2)
    bad = nan_model(1)
    for t, d, who in ((bad, draft, "target model"), (target, bad, "draft model")):
        engine = SpeculativeEngine(t, d, rule=rule, K=K, L=3, sampling=SamplingConfig(1.0),
                                   layout=layout)
        records = []
        with pytest.raises(NonFiniteError, match=f"^{who} gave a non-finite probability row "
                                                 r"\(NaN or inf logits\) at iteration 0"):
            engine.generate(PROMPT, 8, seed=0, on_iteration=records.append)
        assert records == []  # nothing of the iteration went past the check
    assert issubclass(NonFiniteError, ValueError)


def test_non_finite_rows_name_their_position(models):
    """A +inf logit only in the draft's deeper calls (one-token inputs after the first
    iteration's prompt): the message names the draft and a depth ≥ 1; a NaN only in the
    target's scoring calls (more than one input token but not the prompt) names the target."""
    target, draft = models
    inf_draft = nan_model(2, when=lambda n: n == 1, value=float("inf"))
    engine = SpeculativeEngine(target, inf_draft, rule="sd", K=1, L=3, layout="batched",
                               sampling=SamplingConfig(1.0))
    with pytest.raises(NonFiniteError, match=r"^draft model .* iteration 0 .* draft 0, depth 1;"):
        engine.generate(PROMPT, 8, seed=0)
    n_prompt = len(PROMPT) - 1  # the target's prefill
    nan_target = nan_model(1, when=lambda n: n != n_prompt)
    engine = SpeculativeEngine(nan_target, draft, rule="spectr", K=2, L=3, layout="batched",
                               sampling=SamplingConfig(1.0))
    with pytest.raises(NonFiniteError, match=r"^target model .* draft 0, row 0 \(rows 0\.\.3"):
        engine.generate(PROMPT, 8, seed=0)
    # validate=True: the same named error, before the verifier's own checks
    engine = SpeculativeEngine(nan_target, draft, rule="sd", K=1, L=3, validate=True)
    with pytest.raises(NonFiniteError, match="^target model"):
        engine.generate(PROMPT, 8, seed=0)


def test_autoregressive_baseline_raises_the_same_kind_of_error():
    with pytest.raises(NonFiniteError, match=r"^target model gave a non-finite .* new token 0"):
        autoregressive_generate(nan_model(1), PROMPT, 4, SamplingConfig(0.7))
    late = nan_model(1, when=lambda n: n == 1)  # the prompt's row is fine, the next ones not
    with pytest.raises(NonFiniteError, match=r"new token 1 \(after 1 emitted"):
        autoregressive_generate(late, PROMPT, 4)


@pytest.mark.parametrize("prompt,message", [
    ([V], rf"prompt_ids: token id {V} outside \[0, {V}\)"),
    ([-1], rf"prompt_ids: token id -1 outside \[0, {V}\)"),
    ([5.7, 3.2], "prompt_ids must be integer token ids, got 5.7"),
    ([2**63], rf"prompt_ids: token id {2**63} outside"),
    (torch.tensor([1.0, 2.0]), "prompt_ids must be integer token ids, got a torch.float32 tensor"),
    (torch.tensor([0, V]), rf"prompt_ids: token id {V} outside"),
    ([], "at least one token"),
])
def test_prompt_ids_are_checked_before_any_forward(models, prompt, message):
    """Out-of-range or non-integer prompt ids: a ValueError naming prompt_ids (not an embedding
    IndexError, a CUDA device assert, or a silent truncation of 5.7 to 5)."""
    target, draft = models
    with pytest.raises(ValueError, match=message):
        SpeculativeEngine(target, draft, rule="sd", K=1, L=2).generate(prompt, 2)
    with pytest.raises(ValueError, match=message):
        autoregressive_generate(target, prompt, 2)


# -- seeds -----------------------------------------------------------------------------------

SEED_PAIRS = [(1, 1 + 2**32), (2, 2**40 + 2), (-1, 2**32 - 1), (0, 2**64), (5, -5)]


def test_generator_seed_distinguishes_every_int():
    seeds = [s for pair in SEED_PAIRS for s in pair] + [2**64 - 1, -(2**80), 3**90]
    hashed = [generator_seed(s) for s in seeds]
    assert len(set(hashed)) == len(seeds) and all(0 <= h < 2**64 for h in hashed)
    # the CPU generator keeps 32 bits of the hash: still distinct for these
    assert len({h & 0xFFFFFFFF for h in hashed}) == len(seeds)
    assert generator_seed(7) == generator_seed(7)
    for bad in (1.0, "1", True, None):
        with pytest.raises(ValueError, match="seed must be an integer"):
            generator_seed(bad)


def test_seeds_that_torch_folded_give_different_generations(models):
    """At T = 1.5 on V = 96, 12 tokens of two independent streams agree with probability far
    below 1e-6: different seeds must give different generations."""
    target, draft = models
    hot = SamplingConfig(1.5)
    engine = SpeculativeEngine(target, draft, rule="sd", K=1, L=3, sampling=hot)
    for a, b in SEED_PAIRS:
        assert engine.generate(PROMPT, 12, seed=a).tokens != engine.generate(PROMPT, 12, seed=b).tokens
        assert (autoregressive_generate(target, PROMPT, 12, hot, seed=a).tokens
                != autoregressive_generate(target, PROMPT, 12, hot, seed=b).tokens)
    big = 2**64 + 12345
    assert engine.generate(PROMPT, 6, seed=big).tokens == engine.generate(PROMPT, 6, seed=big).tokens
    with pytest.raises(ValueError, match="seed"):
        engine.generate(PROMPT, 4, seed=0.5)


# -- metrics: τ counts the draft tokens returned ----------------------------------------------

def test_tau_counts_kept_draft_tokens_at_eos_and_max_new_tokens(models):
    """Draft = target, both one-hot (top-k 1): every draft is accepted (τ = L = 5 per
    iteration).  With the third token as EOS the first iteration emits 6 tokens, keeps 3: τ
    counted 3 (block efficiency 3, mean τ 3, acceptance rate 3/5), the raw τ 5 is kept apart."""
    target, _ = models
    greedy = SamplingConfig(1.0, top_k=1)
    free = SpeculativeEngine(target, target, rule="sd", K=1, L=5, sampling=greedy)
    long = free.generate(PROMPT, 12, seed=0)
    assert long.taus == long.taus_raw and set(long.taus) == {5}
    eos = long.tokens[2]
    assert eos not in long.tokens[:2]
    engine = SpeculativeEngine(target, target, rule="sd", K=1, L=5, sampling=greedy,
                               eos_token_ids=[eos])
    r = engine.generate(PROMPT, 12, seed=0)
    assert r.tokens == long.tokens[:3] and r.stop_reason == "eos"
    assert (r.taus_raw, r.taus, r.target_calls) == ([5], [3], 1)
    assert r.block_efficiency == 3.0 and r.mean_accepted == 3.0
    assert r.acceptance_rate == pytest.approx(3 / 5)
    assert r.per_position_acceptance == [1, 1, 1, 0, 0]
    assert sum(r.per_position_acceptance) == pytest.approx(r.mean_accepted)
    # max_new_tokens = 8 without the block cap: iteration 1 keeps 6 (τ 5), iteration 2 drafts
    # 5 and keeps 2 draft tokens
    uncapped = SpeculativeEngine(target, target, rule="sd", K=1, L=5, sampling=greedy, cap_blocks=False)
    r = uncapped.generate(PROMPT, 8, seed=0)
    assert (r.taus_raw, r.taus, r.block_lengths) == ([5, 5], [5, 2], [5, 5])
    assert r.mean_accepted == 3.5 and r.block_efficiency == 4.0
    # with it (the default), iteration 2 drafts the one position that can still be kept
    r = free.generate(PROMPT, 8, seed=0)
    assert (r.taus_raw, r.taus, r.block_lengths) == ([5, 1], [5, 1], [5, 1])
    assert r.tokens == long.tokens[:8] and r.block_efficiency == 4.0


def test_hf_assisted_counts_target_calls_only_with_the_same_model_object(models):
    """With one object as target and assistant a forward hook would also count the
    assistant's calls; the iteration count cannot.  With the target as its own assistant every
    drafted token is accepted (p = q) and the assistant drafts at least one per iteration, so
    every iteration but the last emits ≥ 2 tokens: ≤ 8 calls for 16 tokens, block efficiency ≥ 2
    (one call per drafted token counted too would bring it to about 1)."""
    target, draft = models
    for d in (target, draft):
        r = assisted_generate(target, d, PROMPT, 16, SamplingConfig(0.9), L=3, seed=1)
        assert r.new_tokens == 16
        if d is target:
            assert all(t >= 1 for t in r.taus[:-1]), r.taus
            assert r.target_calls <= 8 and r.block_efficiency >= 2.0, (r.target_calls, r.taus)
        assert len(r.taus) == len(r.taus_raw) == r.target_calls
        assert all(0 <= t <= 3 for t in r.taus)
        # one definition: every iteration but a truncated last one returned τ + 1 tokens
        assert sum(t + 1 for t in r.taus[:-1]) < 16 <= sum(t + 1 for t in r.taus)
        assert r.mean_accepted == pytest.approx(sum(r.taus) / r.target_calls)


def test_hf_assisted_tau_is_cut_at_eos_and_max_new_tokens(models):
    """Greedy target = assistant (top-k 1): every candidate is accepted.  With EOS = the third
    token, τ counts the 3 returned draft tokens (the assistant itself stops drafting at EOS);
    at max_new_tokens = 8 the second iteration drafts the 1 token that fits (τ = 1, + bonus)."""
    target, _ = models
    greedy = SamplingConfig(1.0, top_k=1)
    long = assisted_generate(target, target, PROMPT, 12, greedy, L=5, seed=0)
    assert long.taus == [5, 5] and long.block_efficiency == 6.0
    eos = long.tokens[2]
    assert eos not in long.tokens[:2]
    r = assisted_generate(target, target, PROMPT, 12, greedy, L=5, seed=0, eos_token_ids=[eos])
    assert r.tokens == long.tokens[:3] and r.stop_reason == "eos"
    assert (r.taus, r.target_calls, r.block_efficiency, r.mean_accepted) == ([3], 1, 3.0, 3.0)
    r = assisted_generate(target, target, PROMPT, 8, greedy, L=5, seed=0)
    assert r.tokens == long.tokens[:8] and r.taus == [5, 1] and r.target_calls == 2
