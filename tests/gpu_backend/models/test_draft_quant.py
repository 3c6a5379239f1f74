"""gpu_backend.models.draft_quant: the int8 dynamically quantised draft, accepted by the engine for
the rules that stay lossless when draft rows depend on the batching of each call (registry
``varying_draft_rows``): the rows handed to the verifier are the rows sampled from, the
one-hot-target construction still gives the target's greedy output, and the other rules are
refused.  Small random models of test_engine.py."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.models.draft_quant import quantize_draft, resolve_mode  # noqa: E402
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.models.pair import load_pair  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
from spectr_gbv.gpu_backend.models.weights import vocab_size  # noqa: E402
from helpers.engine_models import (V, assert_one_hot_target_reproduces_greedy, perturbed, random_lm,  # noqa: E402
                         run_recorded, uncached_row)


@pytest.fixture(scope="module")
def models():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = random_lm(1)
    yield target, quantize_draft(perturbed(target, 2), "int8")
    torch.set_num_threads(threads)


def test_every_linear_is_quantised_and_the_vocabulary_kept(models):
    _, draft = models
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    assert not any(type(m) is torch.nn.Linear for m in draft.modules())
    assert isinstance(draft.lm_head, DynamicLinear)
    assert vocab_size(draft) == V


def test_draft_rows_are_the_rows_sampled_from_and_depend_on_the_call(models):
    """Every drafted token has positive probability in the row handed to the verifier, each
    row is normalised, and rows differ from a call on the prefix alone (the activation scale
    is per call): the reason the engine accepts a quantised draft only for some rules."""
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule="spectr", K=2, L=3, sampling=SamplingConfig(0.8),
                               draft_sampling=SamplingConfig(1.2))
    _, records = run_recorded(engine, 20, seed=4)
    worst = 0.0
    for rec in records:  # S ≤ 3 positions (the last blocks are capped at the tokens still needed)
        S = rec.draft_tokens.shape[1]
        torch.testing.assert_close(rec.draft_probs.sum(-1), torch.ones(2, S), atol=1e-5, rtol=0)
        for k in range(2):
            block = rec.draft_tokens[k].tolist()
            for i in range(S):
                assert rec.draft_probs[k, i, block[i]] > 0
                alone = uncached_row(draft, rec.context + block[:i], SamplingConfig(1.2))
                worst = max(worst, float((rec.draft_probs[k, i] - alone).abs().max()))
    assert 1e-4 < worst < 0.1, worst


@pytest.mark.parametrize("rule,K", [("kseq_gbv", 2), ("gbv", 1), ("traversal", 2), ("mdbv", 2)])
def test_rules_that_need_a_fixed_draft_law_refuse_a_quantised_draft(models, rule, K):
    target, draft = models
    with pytest.raises(ValueError, match=r"draft: a dynamically quantised draft .* not lossless"):
        SpeculativeEngine(target, draft, rule=rule, K=K, L=3)


@pytest.mark.parametrize("rule,K", [("spectr", 2), ("bv", 1), ("sd", 1)])
def test_one_hot_target_reproduces_autoregressive_output_with_an_int8_draft(models, rule, K):
    assert_one_hot_target_reproduces_greedy(*models, rule, K, 20)


def test_refusals():
    with pytest.raises(ValueError, match="mode must be one of"):
        quantize_draft(torch.nn.Linear(2, 2), "int4")
    with pytest.raises(ValueError, match="model: .*float32"):
        quantize_draft(torch.nn.Linear(2, 2).to(torch.bfloat16), "int8")
    with pytest.raises(ValueError, match="draft_quant must be one of"):
        load_pair("target", "draft", "bfloat16", draft_quant="fp8")  # refused before any load
    lin = torch.nn.Linear(2, 2)
    assert quantize_draft(lin, "none") is lin


def test_auto_mode_quantises_only_the_measured_draft_with_allowed_rules():
    assert resolve_mode("auto", "draft", "spectr") == "int8"
    assert resolve_mode("auto", "draft", "sd") == "int8"
    assert resolve_mode("auto", "tiny", "spectr") == "none"  # not measured to pay
    assert resolve_mode("auto", "draft", "kseq_gbv") == "none"  # not allowed
    assert resolve_mode("auto", "draft", "ar") == "none"
    assert resolve_mode("auto", "draft", "spectr", device="cuda") == "none"
    assert resolve_mode("auto", "draft", "spectr", device=torch.device("cpu")) == "int8"
    with pytest.raises(ValueError, match="'ar' drafts nothing"):
        resolve_mode("int8", "draft", "ar")
    assert resolve_mode("none", "draft", "kseq_gbv") == "none"
    with pytest.raises(ValueError, match="'traversal' is not lossless with an int8"):
        resolve_mode("int8", "draft", "traversal")
