"""``certify_generate`` on real engines with the embedded tiny SmolLM2-135M-Instruct (marked
``models``): each engine's speculative mode and lossless control pass, each negative control is
caught.  N and the measured time per mode are stated on each test; power: the pooled KS tests'
detectable PIT deviation d at power 0.99 (``oracle.sequence_test.detectable_deviation``) is
asserted where it matters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from spectr_gbv.cli import certify as certify_cli  # noqa: E402
from spectr_gbv.gpu_backend.certify.engines import modes as gm  # noqa: E402

pytestmark = pytest.mark.models


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_cli_constants_agree_with_the_library():
    assert certify_cli.GENERATE_ENGINES == gm.ENGINES
    assert certify_cli.GENERATE_SAMPLES == gm.DEFAULT_SAMPLES
    assert certify_cli.GENERATE_QUICK_SAMPLES == gm.QUICK_SAMPLES


def _run(engine, names, n, n_new=16):
    res = gm.run_modes(engine, n, n_new, alpha=1e-3, names=names)
    assert len(res) == len(names)
    return {r.mode.name: r for r in res}
