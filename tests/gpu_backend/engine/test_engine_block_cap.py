"""The engine caps a block at the tokens still needed (``cap_blocks``,
reference.draft_stopping.block_cap): with n of N tokens out it drafts max(1, min(L, N − n − 1))
positions.  That every lossless rule keeps its law under the cap is checked exactly in
tests/reference/test_block_cap.py (proofs_check/BLOCK_CAP.md); these tests check the engine's
wiring on the small random models of test_engine.py (V = 96), seconds.  test_engine.py's exact
one-hot construction runs every rule with its last blocks capped, and
test_engine_models.py's stack test checks Algorithm 2's windows of capped blocks against the
reference decoder."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
from spectr_gbv.gpu_backend.verifiers import get_verifier  # noqa: E402
from spectr_gbv.reference.draft_stopping import block_cap  # noqa: E402
from helpers.engine_models import PROMPT, models, one_thread, run_recorded, uncached_row  # noqa: E402,F401


def test_a_huge_block_drafts_only_what_can_be_emitted(models):
    """L = 64 with 5 tokens wanted: the first block has 4 positions, not 64, and every block
    is the cap at its start; the rows stay those of direct model calls."""
    target, draft = models
    sampling = SamplingConfig(0.9)
    engine = SpeculativeEngine(target, draft, rule="spectr", K=2, L=64, sampling=sampling)
    result, records = run_recorded(engine, 5, seed=3)
    assert result.new_tokens == 5
    n = 0
    for rec, S in zip(records, result.block_lengths):
        assert S == block_cap(n, 5, 64) == rec.draft_tokens.shape[1]
        n += len(rec.emitted)
    assert result.block_lengths[0] == 4
    rec = records[0]
    for i in range(5):
        prefix = rec.context + rec.draft_tokens[0].tolist()[:i]
        torch.testing.assert_close(rec.target_probs_raw[0, i], uncached_row(target, prefix, sampling), atol=1e-5, rtol=0)


def test_block_lengths_follow_the_cap_and_the_switch(models):
    target, draft = models
    kwargs = dict(rule="bv", K=1, L=4, sampling=SamplingConfig(0.9))
    capped = SpeculativeEngine(target, draft, **kwargs).generate(PROMPT, 30, seed=2)
    plain = SpeculativeEngine(target, draft, **kwargs, cap_blocks=False).generate(PROMPT, 30, seed=2)
    assert set(plain.block_lengths) == {4}
    assert min(capped.block_lengths) < 4 and capped.block_lengths[0] == 4
    n = 0
    for S, tau in zip(capped.block_lengths, capped.taus_raw):
        assert S == block_cap(n, 30, 4)
        n += tau + 1
    # identical until the cap first binds: the same seed, the same draws
    first = next(i for i, S in enumerate(capped.block_lengths) if S < 4)
    assert capped.taus_raw[:first] == plain.taus_raw[:first]


def test_defaults_and_bad_values(models):
    target, draft = models
    assert SpeculativeEngine(target, draft, rule="gbv", K=1, L=4).cap_blocks is True
    assert SpeculativeEngine(target, draft, rule="spectr_gbv", K=2, L=4).cap_blocks is False  # lossy: as released
    custom = get_verifier("spectr")
    assert SpeculativeEngine(target, draft, K=2, L=4, verifier=custom).cap_blocks is False
    assert SpeculativeEngine(target, draft, K=2, L=4, verifier=custom, cap_blocks=True).cap_blocks is True
    with pytest.raises(ValueError, match="cap_blocks must be True, False or None"):
        SpeculativeEngine(target, draft, rule="spectr", K=2, L=4, cap_blocks=1)


def test_buffers_and_window_check_use_the_first_block_not_L(models, monkeypatch):
    """L = 10,000 with 6 tokens wanted: the draft buffers hold the first block's 5 positions, and
    a model whose window L would outgrow is accepted (K·L + the context never reach it)."""
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule="sd", K=1, L=10_000, sampling=SamplingConfig(0.9))
    result, records = run_recorded(engine, 6, seed=1)
    assert result.new_tokens == 6 and records[0].draft_tokens.shape == (1, 5)
    from spectr_gbv.gpu_backend.torch_backend import backend as torch_backend

    # the target as a sliding-window model of 64 positions (the torch backend's check_length)
    monkeypatch.setattr(torch_backend, "sliding_window_limit", lambda config: 64 if config is target.config else None)
    assert engine.generate(PROMPT, 6, seed=1).tokens == result.tokens
    uncapped = SpeculativeEngine(target, draft, rule="sd", K=1, L=10_000, sampling=SamplingConfig(0.9),
                                 cap_blocks=False)
    with pytest.raises(ValueError, match=r"sliding window \(64\) is too short"):
        uncapped.generate(PROMPT, 6, seed=1)
