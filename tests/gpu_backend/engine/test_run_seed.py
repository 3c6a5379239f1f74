"""seed=None (the default of SpeculativeEngine.generate, autoregressive_generate and
assisted_generate) draws a fresh 64-bit seed from the operating system, reports it in
GenerationResult.seed (and metrics()), and that seed replays the run token for token; on the
small random models of test_engine.py (seconds)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate  # noqa: E402
from spectr_gbv.reference import seeds  # noqa: E402
from helpers.engine_models import PROMPT, models, one_thread  # noqa: E402,F401

SAMPLING = SamplingConfig(1.0)


def test_resolve_seed():
    assert seeds.resolve_seed(7) == 7 and seeds.resolve_seed(-3) == -3 and seeds.resolve_seed(2**70) == 2**70
    fresh = [seeds.resolve_seed(None) for _ in range(64)]
    assert all(isinstance(s, int) and 0 <= s < 2**64 for s in fresh)
    assert len(set(fresh)) == 64
    assert max(fresh) >= 2**62  # 64 bits drawn, not fewer (fails with probability 2^-128)
    for bad in (1.0, "3", True):
        with pytest.raises(ValueError, match="seed must be an integer"):
            seeds.resolve_seed(bad)


def test_unseeded_runs_differ_and_replay_with_the_reported_seed(models, monkeypatch):
    target, draft = models
    engine = SpeculativeEngine(target, draft, rule="spectr", K=2, L=3, sampling=SAMPLING)
    runs = [engine.generate(PROMPT, 16) for _ in range(3)]
    assert len({r.seed for r in runs}) == 3
    assert len({tuple(r.tokens) for r in runs}) >= 2  # T = 1 on a 96-token vocabulary
    for run in runs:
        assert run.metrics()["seed"] == run.seed
        again = engine.generate(PROMPT, 16, seed=run.seed)
        assert again.seed == run.seed and again.tokens == run.tokens and again.taus_raw == run.taus_raw
    assert engine.generate(PROMPT, 8, seed=5).seed == 5
    # the fresh seed comes from reference.seeds.fresh_seed (the OS source), once per run
    monkeypatch.setattr(seeds, "fresh_seed", lambda: 12345)
    assert engine.generate(PROMPT, 8).tokens == engine.generate(PROMPT, 8, seed=12345).tokens
    with pytest.raises(ValueError, match="seed must be an integer"):
        engine.generate(PROMPT, 8, seed=1.5)


def test_autoregressive_unseeded_runs_differ_and_replay(models):
    target, _ = models
    runs = [autoregressive_generate(target, PROMPT, 16, SAMPLING) for _ in range(3)]
    assert len({r.seed for r in runs}) == 3 and len({tuple(r.tokens) for r in runs}) >= 2
    for run in runs:
        assert autoregressive_generate(target, PROMPT, 16, SAMPLING, seed=run.seed).tokens == run.tokens
        assert run.metrics()["seed"] == run.seed


def test_cli_generate_seed_defaults_to_none_and_is_printed(capsys):
    from spectr_gbv.cli import main as cli_main
    from spectr_gbv.cli.generate import _print_metrics
    from spectr_gbv.gpu_backend.engine.result import GenerationResult

    parser = cli_main.build_parser()
    assert parser.parse_args(["generate", "--prompt", "hi"]).seed is None
    assert parser.parse_args(["generate", "--prompt", "hi", "--seed", str(2**64 - 1)]).seed == 2**64 - 1
    args = parser.parse_args(["generate", "--prompt", "hi", "--temperature", "0", "--rule", "ar"])
    result = GenerationResult("ar", [1, 2], 3, 2, [], 1, 0, 0.5, 10**9, "max_new_tokens", seed=2**64 - 1)
    _print_metrics(result, args, "float32", "none", None)
    first = capsys.readouterr().out.splitlines()[1]
    assert first == (f"rule ar  T=0.0 (greedy)  float32  stop: max_new_tokens  seed {2**64 - 1} "
                     f"(replay: --seed {2**64 - 1})")


def test_assisted_generate_reports_and_replays_its_seed(models):
    from spectr_gbv.gpu_backend.bench.assisted import assisted_generate

    target, draft = models
    run = assisted_generate(target, draft, PROMPT, 12, SAMPLING, L=3)
    assert isinstance(run.seed, int) and 0 <= run.seed < 2**64
    assert assisted_generate(target, draft, PROMPT, 12, SAMPLING, L=3, seed=run.seed).tokens == run.tokens
    # greedy: transformers' do_sample=False assisted generation gives the engine's greedy tokens
    greedy = SamplingConfig(0.0)
    assert (assisted_generate(target, draft, PROMPT, 12, greedy, L=3).tokens
            == autoregressive_generate(target, PROMPT, 12, greedy).tokens)
