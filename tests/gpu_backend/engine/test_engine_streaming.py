"""``streamer=`` of the engine and of the AR baseline (transformers' streamer protocol:
``put(tensor)`` per accepted chunk, ``end()`` once), on the small random models of
test_engine.py."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
# the small models and the one-thread setting of test_engine.py (pytest fixtures, imported)
from helpers.engine_models import PROMPT, models, one_thread  # noqa: E402,F401


class Recorder:
    def __init__(self):
        self.chunks, self.ended = [], 0

    def put(self, value):
        assert self.ended == 0 and value.dtype == torch.int64 and value.dim() == 1
        self.chunks.append(value.tolist())

    def end(self):
        self.ended += 1


@pytest.mark.parametrize("rule,K", [("spectr", 2), ("gbv", 1)])
def test_engine_streams_each_iterations_kept_tokens(models, rule, K):
    target, draft = models
    rec = Recorder()
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=SamplingConfig(0.9))
    result = engine.generate(PROMPT, 21, seed=3, streamer=rec)
    assert [t for c in rec.chunks for t in c] == result.tokens and rec.ended == 1
    assert len(rec.chunks) == result.target_calls  # one chunk per iteration (none is empty here)
    # the same seed without a streamer gives the same tokens: streaming draws nothing
    assert engine.generate(PROMPT, 21, seed=3).tokens == result.tokens


def test_autoregressive_streams_one_token_at_a_time(models):
    target, _ = models
    rec = Recorder()
    result = autoregressive_generate(target, PROMPT, 9, SamplingConfig(0.9), seed=1, streamer=rec)
    assert rec.chunks == [[t] for t in result.tokens] and rec.ended == 1
