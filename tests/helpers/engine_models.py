"""Two small random transformers models (V = 96, 2 layers) for the engine's tests, the
prompt, the rules with their K, and the fixtures and checks the engine tests share."""

import pytest
import torch

from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine

V = 96
PROMPT = [5, 17, 33, 2, 71, 8, 40]
ALL_RULES = [("sd", 1), ("spectr", 3), ("bv", 1), ("gbv", 1), ("spectr_gbv", 3),
             ("spectr_gbv_fixed", 3), ("kseq_gbv", 3), ("kseq_bv", 3), ("traversal", 3), ("mdbv", 3)]


def random_lm(seed: int, vocab: int = V, head_scale: float = 30.0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return model


def perturbed(model, seed: int, scale: float = 0.3):
    """A draft that resembles the target: its weights plus Gaussian noise of relative size
    ``scale`` (two independent random models would almost never agree)."""
    import copy

    gen = torch.Generator().manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale * p.std().clamp_min(1e-3))
    return draft


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These models are tiny: one thread avoids oversubscription on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models():
    target = random_lm(1)
    return target, perturbed(target, 2)


@torch.inference_mode()
def uncached_row(model, tokens, sampling):
    logits = model(torch.tensor([tokens])).logits[0, -1]
    return probabilities(logits, sampling)


def run_recorded(engine, n_tokens, seed):
    records = []
    result = engine.generate(PROMPT, n_tokens, seed=seed, on_iteration=records.append)
    return result, records


def assert_one_hot_target_reproduces_greedy(target, draft, rule, K, n_tokens):
    """The engine at top-k = 1 (target one-hot), draft at T = 1.5, equals plain greedy sampling
    token for token, with rejections along the way; returns the iteration records."""
    greedy = SamplingConfig(1.0, top_k=1)
    ar = autoregressive_generate(target, PROMPT, n_tokens, greedy, seed=0)
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=greedy,
                               draft_sampling=SamplingConfig(1.5))
    result, records = run_recorded(engine, n_tokens, seed=7)
    assert result.tokens == ar.tokens
    assert any(int(r.verdict.tau[0]) < 4 for r in records)  # rejections happened
    return records
