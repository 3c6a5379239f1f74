"""The engine with a draft-side stopping policy (reference.draft_stopping): drafting ends
early, the verifier gets the S ≤ L drafted positions, both caches stay exact.  Small random
models of test_engine.py (V = 96), seconds.  That the rules accepted here stay lossless under
stopping is proved with the exact engine (proofs_check/DRAFT_STOPPING.md,
tests/reference/test_draft_stopping.py); these tests check the engine's wiring."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
from spectr_gbv.reference.draft_stopping import ConfidenceStop, StopAt  # noqa: E402
from spectr_gbv.reference.rules import registry
# the small models and the one-thread setting of test_engine.py (pytest fixtures, imported)
from helpers.engine_models import PROMPT, models, one_thread, run_recorded, uncached_row  # noqa: E402,F401

STOPPING_RULES = [(r, 1 if registry.is_single_draft(r) else 3) for r in registry.names(draft_stopping=True)]


# thresholds that give both short and full blocks at these temperatures
@pytest.mark.parametrize("rule,K,layout,threshold", [
    ("spectr", 3, "packed", 0.5), ("spectr", 3, "batched", 0.5), ("bv", 1, "packed", 0.15),
    ("traversal", 2, "batched", 0.3)])
def test_rows_equal_uncached_calls_when_drafting_stops(models, rule, K, layout, threshold):
    """Every draft row and raw target row of the S drafted positions equals a direct model call
    on the full prefix to 1e-5 (float32), over iterations with S < L and S = L, crops and
    bonuses: the cut back after a short block keeps both caches exact."""
    target, draft = models
    sampling, draft_sampling = SamplingConfig(0.8), SamplingConfig(1.3)
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=sampling,
                               draft_sampling=draft_sampling, layout=layout,
                               draft_stop=ConfidenceStop(threshold))
    result, records = run_recorded(engine, 40, seed=3)
    assert len(set(result.block_lengths)) >= 2 and max(result.block_lengths) == 4, result.block_lengths
    for rec, S in zip(records, result.block_lengths):
        assert rec.draft_tokens.shape == (K, S) and rec.target_probs_raw.shape[:2] == (K, S + 1)
        assert int(rec.verdict.tau[0]) <= S
        for k in range(K):
            block = rec.draft_tokens[k].tolist()
            for i in range(S + 1):
                prefix = rec.context + block[:i]
                torch.testing.assert_close(rec.target_probs_raw[k, i], uncached_row(target, prefix, sampling),
                                           atol=1e-5, rtol=0)
                if i < S:
                    torch.testing.assert_close(rec.draft_probs[k, i], uncached_row(draft, prefix, draft_sampling),
                                               atol=1e-5, rtol=0)
    assert [t for rec in records for t in rec.emitted][: result.new_tokens] == result.tokens


@pytest.mark.parametrize("rule,K", STOPPING_RULES)
def test_one_hot_target_reproduces_autoregressive_output_when_drafting_stops(models, rule, K):
    """test_engine.py's exact construction (one-hot target rows) with confidence stopping:
    every accepted rule must still emit the target's argmax at every position."""
    target, draft = models
    greedy = SamplingConfig(1.0, top_k=1)
    ar = autoregressive_generate(target, PROMPT, 24, greedy, seed=0)
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=greedy,
                               draft_sampling=SamplingConfig(1.5), draft_stop=ConfidenceStop(0.5))
    result, _ = run_recorded(engine, 24, seed=7)
    assert result.tokens == ar.tokens
    assert min(result.block_lengths) < 4


def test_policy_that_never_stops_gives_the_same_stream(models):
    """A threshold of 0 never stops and draws nothing extra: the same seed gives the same
    tokens, τ and block lengths as no policy (the block cap off, so that every S = L)."""
    target, draft = models
    runs = [SpeculativeEngine(target, draft, rule="spectr", K=2, L=4, sampling=SamplingConfig(0.9),
                              draft_stop=stop, cap_blocks=False).generate(PROMPT, 30, seed=11)
            for stop in (None, ConfidenceStop(0.0))]
    assert runs[0].tokens == runs[1].tokens and runs[0].taus == runs[1].taus
    assert runs[0].block_lengths == runs[1].block_lengths == [4] * len(runs[0].taus)


def test_constant_policy_and_metrics(models):
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule="bv", K=1, L=4, sampling=SamplingConfig(0.9),
                               draft_stop=StopAt(2), cap_blocks=False)  # S = 2 even at the end
    result = engine.generate(PROMPT, 30, seed=2)
    assert set(result.block_lengths) == {2} and max(result.taus_raw) <= 2
    assert result.draft_positions_per_iteration == 2.0
    assert result.metrics()["draft_positions_per_iteration"] == 2.0


@pytest.mark.parametrize("rule,K", [("gbv", 1), ("kseq_gbv", 2), ("spectr_gbv", 2)])
def test_rules_not_proved_under_stopping_are_refused(models, rule, K):
    target, draft = models
    with pytest.raises(ValueError, match=r"draft_stop: rule .* not certified lossless"):
        SpeculativeEngine(target, draft, rule=rule, K=K, L=4, draft_stop=ConfidenceStop(0.4))


def test_custom_verifier_that_modifies_targets_is_refused_with_stopping(models):
    """Its Algorithm 2 windows would outlast a stopped block: refused at construction, while
    the same verifier without stopping, and a non-modifying custom verifier with it, are taken."""
    from spectr_gbv.gpu_backend.verifiers import get_verifier

    target, draft = models
    gbv = get_verifier("gbv")
    assert gbv.modifies_targets
    with pytest.raises(ValueError, match="draft_stop: the custom verifier declares modifies_targets"):
        SpeculativeEngine(target, draft, K=1, L=4, verifier=gbv, draft_stop=ConfidenceStop(0.4))
    SpeculativeEngine(target, draft, K=1, L=4, verifier=gbv)
    result = SpeculativeEngine(target, draft, K=1, L=4, verifier=get_verifier("sd"),
                               draft_stop=StopAt(2)).generate(PROMPT, 9, seed=3)
    assert max(result.block_lengths) <= 2


def test_engine_refuses_a_bare_threshold_and_calls_a_subclass_as_the_reference_does(models):
    target, draft = models
    with pytest.raises(ValueError, match="draft_stop must be a stopping policy"):
        SpeculativeEngine(target, draft, rule="spectr", K=2, L=3, draft_stop=0.4)

    class AlwaysStop(ConfidenceStop):  # overrides __call__: the engine must not use decide()
        def __call__(self, position, rows, tokens):
            return True

    result = SpeculativeEngine(target, draft, rule="spectr", K=2, L=3,
                               draft_stop=AlwaysStop(0.0)).generate(PROMPT, 10, seed=1)
    assert set(result.block_lengths) == {1}


def test_acceptance_metrics_count_drafted_positions(models):
    """With blocks cut short, the acceptance rate is Σ τ / Σ S and per-position acceptance is
    conditioned on the position being drafted."""
    target, draft = models
    result = SpeculativeEngine(target, draft, rule="bv", K=1, L=4, sampling=SamplingConfig(0.9),
                               draft_stop=StopAt(2), cap_blocks=False).generate(PROMPT, 30, seed=2)
    assert result.acceptance_rate == pytest.approx(sum(result.taus) / (2 * len(result.taus)), abs=1e-12)
    ppa = result.per_position_acceptance
    assert ppa[0] == pytest.approx(sum(t >= 1 for t in result.taus) / len(result.taus), abs=1e-12)
    assert all(x != x for x in ppa[2:])  # NaN: no iteration drafted positions 3 and 4
