"""Auto-configuration that notices it was wrong (issue 27, item 5): interleaved timings whose
median drops a transient load, the busy-machine check, and the decode-rate check of every
generation, tested by planting a stale cache (costs scaled by 3 and by 1/3)."""

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
from spectr_gbv.gpu_backend.tuning import autoconfig  # noqa: E402
from spectr_gbv.gpu_backend.tuning import cache as tuning_cache  # noqa: E402
from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure  # noqa: E402
from spectr_gbv.gpu_backend.tuning.timing import TimingQuality, timed_interleaved  # noqa: E402
from spectr_gbv.gpu_backend.tuning.recheck import compare, decode_tokens_per_iteration, recheck  # noqa: E402
from spectr_gbv.gpu_backend.tuning.shape import ShapeChoice  # noqa: E402
from spectr_gbv.gpu_backend.tuning.speed_model import iteration_seconds  # noqa: E402
from helpers.engine_models import PROMPT, perturbed, random_lm  # noqa: E402


class FakeClock:
    """A wall clock that each timed function advances by its programmed seconds; ``load``
    adds seconds to every call of one round (a transient load)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_interleaved_medians_drop_a_transient_load():
    clock, calls = FakeClock(), []
    base = [0.010, 0.020, 0.040]
    load = {2: 0.5}  # round 2 (0-based, after the warm-up) runs 0.5 s slower for every function

    def fn(i):
        def call():
            rnd = sum(1 for c in calls if c == i) - 1  # -1: the warm-up
            calls.append(i)
            clock.now += base[i] + load.get(rnd, 0.0)
        return call

    secs, quality = timed_interleaved([fn(i) for i in range(3)], repeats=5, clock=clock,
                                      cpu_clock=lambda: clock.now, machine_clock=lambda: clock.now,
                                      threads=1, cores=2)
    assert secs == pytest.approx(base, abs=1e-12)
    # interleaved: warm-ups 0, 1, 2, then rounds 0, 1, 2, 0, 1, 2, ...
    assert calls == [0, 1, 2] + [0, 1, 2] * 5
    # every function saw the load once: (max − min) / median = 0.5 / base ≥ 12.5 → busy
    assert quality.spread == pytest.approx(0.5 / 0.020, rel=1e-9) and quality.calls == 15
    assert not quality.quiet and "busy while timing" in quality.line()


def test_quiet_machine_and_other_processes_load():
    clock = FakeClock()
    machine = {"busy": 0.0}

    def call():
        clock.now += 0.01
        machine["busy"] += 0.01 + 0.014  # this process, and others using 1.4 cores meanwhile

    secs, q = timed_interleaved([call], repeats=3, clock=clock, cpu_clock=lambda: clock.now,
                                machine_clock=lambda: machine["busy"], threads=1, cores=2)
    assert secs == [pytest.approx(0.01)] and q.spread == pytest.approx(0.0, abs=1e-9)
    # 1.4 other cores with 1 free: within the 0.5 slack, quiet
    assert q.other_cores == pytest.approx(1.4) and q.free_cores == 1.0 and q.quiet
    # another process holding this one's core: 2.1 other cores with 1 free → busy, in one line
    busy = TimingQuality(0.0, 2.1, 1.0, 3)
    assert not busy.quiet and "other processes used 2.1 cores with 1 free" in busy.line()
    assert "\n" not in busy.line()
    assert not TimingQuality(0.26, float("nan"), 1.0, 3).quiet and TimingQuality(0.1, float("nan"), 1.0, 3).quiet
    assert busy.merged(TimingQuality(0.3, 0.2, 3.0, 2)) == TimingQuality(0.3, 2.1, 1.0, 5)
    # the real counters: a number of cores' worth ≥ 0 (or NaN off Linux)
    _, real = timed_interleaved([lambda: sum(range(1000))], repeats=3)
    assert real.other_cores >= 0 or real.other_cores != real.other_cores


def test_compare_thresholds_at_25_percent_either_way():
    assert compare(2.0, 2.5).line is None and compare(2.0, 1.5).line is None  # ±25 %: kept
    fast = compare(2.0, 2.51)
    assert fast.stale and "+25.5 %" in fast.line and "timed again on the next run" in fast.line
    slow = compare(2.0, 1.49)
    assert slow.stale and slow.deviation == pytest.approx(-0.255)
    # the costs explain the rate at this prompt's acceptance: kept, said in one line
    explained = compare(2.0, 3.0, tokens_per_iteration=3.0, iteration_s=1.0)
    assert not explained.stale and explained.cost_predicted == 3.0 and "cache is kept" in explained.line
    assert "\n" not in explained.line and "\n" not in fast.line
    with pytest.raises(ValueError, match="finite and > 0"):
        compare(2.0, float("nan"))


@pytest.fixture()
def tiny_pair(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning_cache, "cache_path", lambda: tmp_path / "autoconfig.json")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = random_lm(1)
    yield target, perturbed(target, 2), tmp_path / "autoconfig.json"
    torch.set_num_threads(threads)


def _plant(path, key, factor):
    """Scale every timed cost of the cached entry ``key`` by ``factor`` (a stale cache)."""
    data = json.loads(path.read_text())
    e = data["entries"][key]
    e["target_s"] = [s * factor for s in e["target_s"]]
    e["draft_s"] = [s * factor for s in e["draft_s"]]
    e["overhead"] = [[K, L, s * factor] for K, L, s in e["overhead"]]
    e["ar_overhead_s"] *= factor
    path.write_text(json.dumps(data))


def _result_at(rate, K, L, taus, first=None):
    """A GenerationResult stand-in decoding at ``rate`` tokens/s with iterations ``taus``."""
    new = sum(t + 1 for t in taus)
    first = taus[0] + 1 if first is None else first
    return SimpleNamespace(decode_tokens_per_second=rate, taus=taus, new_tokens=new, first_emission_tokens=first,
                           K=K, L=L)


@pytest.mark.parametrize("factor", [3.0, 1 / 3])
def test_a_planted_stale_cache_is_timed_again_after_one_line(tiny_pair, factor):
    target, draft, path = tiny_pair
    spec = PairSpec("t", "d", "float32")
    args = dict(rule="spectr", sampling=SamplingConfig(0.7), Ks=(1, 2), Ls=(1, 2, 3), fallback_prompt=PROMPT,
                log=lambda line: None)
    first = configure(target, draft, None, spec, **args)
    assert first.costs_key is not None and "timing" in json.loads(path.read_text())["entries"][first.costs_key]
    _plant(path, first.costs_key, factor)
    planted = configure(target, draft, None, spec, **args)
    assert "costs" in planted.cached
    b = planted.choice.best
    choice = ShapeChoice("spectr", b.K, b.L, b.tokens_per_second, planted)
    # the machine really runs at the unplanted costs, at the predicted acceptance
    true_rate = b.tokens_per_iteration / iteration_seconds(first.costs, b.K, b.L)
    assert true_rate / b.tokens_per_second == pytest.approx(factor, rel=1e-9)
    per_call = round(b.tokens_per_iteration - 1)
    result = _result_at(true_rate, b.K, b.L, [per_call] * 5)
    lines = []
    check = recheck(choice, result, lines.append)
    assert check.stale and len(lines) == 1 and "marked stale" in lines[0]
    assert f"{100 * (factor - 1):+.1f} %" in lines[0]
    entry = json.loads(path.read_text())["entries"][first.costs_key]
    assert entry["stale"].startswith("a generation decoded")
    # the next configure times the costs again (acceptance and text still cached), in one line
    lines = []
    again = configure(target, draft, None, spec, **{**args, "log": lines.append})
    assert sorted(again.cached) == ["acceptance", "text"]
    assert sum("marked stale" in x for x in lines) == 1 and "timing the models and the verifier again" in lines[0]
    assert "stale" not in json.loads(path.read_text())["entries"][first.costs_key]
    # the costs were timed again (not the planted ones: those are exactly factor × the first),
    # and a third run reads them from the cache.  (How close they come to the first timing
    # depends on this shared machine's load: not asserted.)
    assert all(a != factor * b0 for a, b0 in zip(again.costs.target_s, first.costs.target_s))
    assert sorted(configure(target, draft, None, spec, **args).cached) == ["acceptance", "costs", "text"]


def test_recheck_keeps_a_cache_that_is_right(tiny_pair):
    target, draft, path = tiny_pair
    spec = PairSpec("t", "d", "float32")
    cfg = configure(target, draft, None, spec, "sd", SamplingConfig(0.7), (1,), (1, 2), fallback_prompt=PROMPT,
                    log=lambda line: None)
    b = cfg.choice.best
    choice = ShapeChoice("sd", b.K, b.L, b.tokens_per_second, cfg)
    lines = []
    assert recheck(choice, _result_at(1.2 * b.tokens_per_second, 1, b.L, [b.L] * 4), lines.append).line is None
    assert lines == [] and "stale" not in json.loads(path.read_text())["entries"][cfg.costs_key]
    # plain sampling chosen: predicted = 1 / (T(1) + draw); measured at half that → stale
    ar = ShapeChoice("ar", 1, 1, cfg.choice.ar_tokens_per_second, cfg, fell_back=True)
    check = recheck(ar, SimpleNamespace(decode_tokens_per_second=cfg.choice.ar_tokens_per_second / 2, taus=[]),
                    lines.append)
    assert check.stale and check.deviation == pytest.approx(-0.5) and len(lines) == 1
    # nothing measured behind the choice, or no decode rate: nothing to compare
    assert recheck(ShapeChoice("sd", 1, 2), _result_at(1.0, 1, 2, [2, 2])) is None
    assert recheck(choice, _result_at(float("nan"), 1, 2, [2])) is None


def test_decode_tokens_per_iteration_leaves_out_the_first_emission():
    r = _result_at(1.0, 1, 4, [4, 1, 2])  # 5 + 2 + 3 tokens; the first iteration's 5 left out
    assert decode_tokens_per_iteration(r) == pytest.approx(5 / 2)
    assert decode_tokens_per_iteration(_result_at(1.0, 1, 4, [4])) is None
