"""gpu_backend.bench.generate_default: the benchmarks' "generate's default" decides per call, end
to end for that prompt's length and the tokens asked for, and runs what it decided (the engines
stubbed: what is checked is the dispatch, not the generation)."""

import pytest

pytest.importorskip("torch")

from spectr_gbv.gpu_backend.bench.generate_default import DefaultMethod  # noqa: E402
from spectr_gbv.gpu_backend.engine import plain as plain_sampling  # noqa: E402
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
        def __init__(self, target, draft, rule, K, L, sampling, eos_token_ids, backend=None):
            ran.append(("engine", rule, K, L, draft))

        def generate(self, ids, n, seed):
            ran.append(("spec", len(ids), n, seed))
            return "spec result"

    def plain(target, ids, n, sampling, seed, eos, backend=None):
        ran.append(("plain", len(ids), n, seed, eos))
        return "plain result"

    monkeypatch.setattr(speculative, "SpeculativeEngine", Engine)
    monkeypatch.setattr(plain_sampling, "autoregressive_generate", plain)
    method = DefaultMethod(auto, "target", "draft", None, [7])
    assert method(list(range(64)), 10, 3) == "spec result"
    assert method(list(range(64)), 1, 4) == "plain result"
    assert method(list(range(64)), 12, 5) == "spec result"
    assert ran == [("engine", "spectr", 1, 1, "draft"), ("spec", 64, 10, 3), ("plain", 64, 1, 4, (7,)),
                   ("spec", 64, 12, 5)]  # one engine per shape, built once
    assert method.line() == "K=1 L=1 in 2 of 3 generations, plain sampling in 1"
    method.decisions.clear()
    assert method.line() == "no generations"


def test_for_generation_keeps_the_candidates_and_margin_and_says_what_it_decided():
    import numpy as np

    costs = Costs((1, 2, 4, 8), (1.0, 1.01, 1.02, 1.04), (1, 2), (0.2, 0.21),
                  {(K, L): 0.0 for K in (1, 2) for L in (1, 2, 3)}, 0.002, {"target": 1.0, "draft": 0.3}, 128)
    acc = Acceptance(np.full((40, 2), 0.5), np.full(40, 0.5), (40,))
    auto = AutoConfig(choose(costs, acc, (1, 2), (1, 2, 3), margin=0.3), costs, acc, ["text", "acceptance", "costs"])
    again = auto.for_generation(64, 10)
    assert again.choice == choose(costs, acc, (1, 2), (1, 2, 3), margin=0.3, prompt_tokens=64, new_tokens=10)
    assert {(p.K, p.L) for p in again.choice.candidates} == {(K, L) for K in (1, 2) for L in (1, 2, 3)}
    c = again.choice
    assert again.summary() == (
        f"auto-configuration (cached): best K={c.best.K} L={c.best.L}: predicted {c.best.tokens_per_iteration:.2f} "
        f"tokens per target call, {c.best.tokens_per_second:.2f} tokens/s decode; plain sampling "
        f"{c.ar_tokens_per_second:.2f} tokens/s; for 64 prompt tokens and 10 new: {c.speculative_seconds:.2f} s "
        f"speculating (the draft's prefill 0.15 s included) against {c.ar_seconds:.2f} s plain sampling end to end\n"
        + (f"→ speculating with K={c.best.K}, L={c.best.L} (predicted speedup {c.predicted_speedup:.2f}× in decode, "
           "the draft's prefill included)" if c.speculate else
           f"→ not speculating: the best shape is predicted at {c.predicted_speedup:.2f}× plain sampling in decode, "
           "the draft's prefill included, below the 1.30× needed"))
    with pytest.raises(ValueError, match="prompt_tokens and new_tokens must be integers >= 1, got None"):
        auto.for_generation(None, 10)
