"""gpu_backend.bench.generate_default: the benchmarks' "generate's default" decides per call, end
to end for that prompt's length and the tokens asked for, and runs what it decided (the engines
stubbed: what is checked is the dispatch, not the generation)."""

import pytest

pytest.importorskip("torch")

from spectr_gbv.gpu_backend.bench.generate_default import DefaultMethod  # noqa: E402
from spectr_gbv.gpu_backend.engine import speculative  # noqa: E402
from spectr_gbv.gpu_backend.tuning.autoconfig import AutoConfig  # noqa: E402
from spectr_gbv.gpu_backend.tuning.speed_model import Acceptance, Costs, choose  # noqa: E402


def test_each_call_is_decided_for_its_own_lengths(monkeypatch):
    import numpy as np

    # K = 1, L = 1 at 1.24x plain sampling in decode; prefill 1.0 s (target), 0.3 s (draft) per
    # 128 prompt tokens: speculating pays for 10 new tokens, not for 1 (test_speed_model)
    costs = Costs((1, 2), (1.0, 1.01), (1,), (0.2,), {(1, 1): 0.0}, 0.002, {"target": 1.0, "draft": 0.3}, 128)
    acc = Acceptance(np.full((40, 1), 0.5), np.full(40, 0.5), (40,))
    auto = AutoConfig(choose(costs, acc, (1,), (1,)), costs, acc, ["text", "acceptance", "costs"])
    ran = []

    class Engine:
        def __init__(self, target, draft, rule, K, L, sampling, eos_token_ids):
            ran.append(("engine", rule, K, L, draft))

        def generate(self, ids, n, seed):
            ran.append(("spec", len(ids), n, seed))
            return "spec result"

    def plain(target, ids, n, sampling, seed, eos):
        ran.append(("plain", len(ids), n, seed, eos))
        return "plain result"

    monkeypatch.setattr(speculative, "SpeculativeEngine", Engine)
    monkeypatch.setattr(speculative, "autoregressive_generate", plain)
    method = DefaultMethod(auto, "target", "draft", None, [7])
    assert method(list(range(64)), 10, 3) == "spec result"
    assert method(list(range(64)), 1, 4) == "plain result"
    assert method(list(range(64)), 12, 5) == "spec result"
    assert ran == [("engine", "spectr", 1, 1, "draft"), ("spec", 64, 10, 3), ("plain", 64, 1, 4, (7,)),
                   ("spec", 64, 12, 5)]  # one engine per shape, built once
    assert method.line() == "K=1 L=1 in 2 of 3 generations, plain sampling in 1"
    method.decisions.clear()
    assert method.line() == "no generations"
