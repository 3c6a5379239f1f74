"""``certify_generate`` on real engines with the embedded tiny SmolLM2-135M-Instruct (marked
``models``): each engine's speculative mode and lossless control pass, each negative control is
caught.  N and the measured time per mode are stated on each test; power: the pooled KS tests'
detectable PIT deviation d at power 0.99 (``oracle.sequence_test.detectable_deviation``) is
asserted where it matters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from spectr_gbv.cli import certify_engine as engine_cli  # noqa: E402
from spectr_gbv.certify.engine import modes as gm  # noqa: E402

pytestmark = pytest.mark.models


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_cli_constants_agree_with_the_library():
    assert engine_cli.ENGINES == gm.ENGINES
    assert engine_cli.DEFAULT_SAMPLES == gm.DEFAULT_SAMPLES
    assert engine_cli.QUICK_SAMPLES == gm.QUICK_SAMPLES
    assert (engine_cli.DEFAULT_NEW_TOKENS, engine_cli.DEFAULT_ALPHA) == (gm.DEFAULT_NEW_TOKENS, 1e-3)


def _run(engine, names, n, n_new=16):
    res = gm.run_modes(engine, n, n_new, alpha=1e-3, names=names)
    assert len(res) == len(names)
    return {r.mode.name: r for r in res}


@pytest.mark.long  # deselected by default: `pytest -m long` (benchmarks/CI_TIMES.md)
@pytest.mark.slow
def test_llama_cpp_python_lossless_pass_and_draft_kept_caught():
    """Prompt lookup and speculation off pass at N = 20 samples of 8 tokens (160 PITs, pooled
    d ≈ 0.25; measured pooled p ≥ 0.02); the draft kept whenever it differs from the sample is
    caught at N = 60 (480 PITs, d ≈ 0.15; it passed at N = 20: on this repetitive prompt the
    n-gram drafts copy what the model copies with high probability).  ~0.5 s per sample alone,
    1.5-3 s on this 2-core machine shared with other jobs: ~3 minutes in all."""
    pytest.importorskip("llama_cpp")
    res = _run("llama-cpp-python", ["prompt lookup", "no speculation"], 20, 8)
    res |= _run("llama-cpp-python", ["draft kept"], 60, 8)
    for r in res.values():
        assert r.error == "", r.error
        assert r.as_expected, (r.mode.name, r.cert.worst())
    assert res["llama-cpp-python prompt lookup"].cert.spec_stats["drafted/sample"] > 0


@pytest.mark.long  # deselected by default: `pytest -m long` (benchmarks/CI_TIMES.md)
@pytest.mark.slow
def test_transformers_assisted_pass_and_late_logits_caught():
    """N = 10 samples of 8 tokens (80 PITs, pooled d ≈ 0.34): the assistant_model mode passes
    (measured p 0.42 / 0.57), the logits read one row late in prompt lookup is caught (measured
    pooled probability-order p = 1.4e-16); 78 s for both on this shared 2-core machine."""
    names = ["assistant_model", "one row late"]
    res = _run("transformers", names, 10, 8)
    for r in res.values():
        assert r.error == "", r.error
        assert r.as_expected, (r.mode.name, r.cert.worst())
