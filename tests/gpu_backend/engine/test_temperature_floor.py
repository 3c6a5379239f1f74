"""The temperature floor (gpu_backend.decoding.temperature): every entry point refuses 0 < T < 1e-4
with one message naming its temperature argument, and accepts T = 0 (greedy) where greedy is
offered; the floor's derivation (float32 overflow of logits / T below it, float32 underflow of
exp making smaller T pointless above it) checked in numbers."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, finite_rows, probabilities  # noqa: E402
from spectr_gbv.gpu_backend.decoding.temperature import (MIN_TEMPERATURE, check_temperature,  # noqa: E402
                                                       temperature_problem)

FLOOR = "must be >= 0.0001 (float32 logits / T overflow below it; 0 is greedy decoding), got 1e-05"
FLOOR_NO_GREEDY = "must be >= 0.0001 (float32 logits / T overflow below it), got 1e-05"


def test_the_check_and_its_messages():
    assert MIN_TEMPERATURE == 1e-4
    assert check_temperature(0) == 0.0 and check_temperature(1e-4) == 1e-4 and check_temperature(np.float32(0.5)) == 0.5
    with pytest.raises(ValueError) as err:
        check_temperature(1e-5)
    assert str(err.value) == "temperature " + FLOOR
    assert temperature_problem(1e-5, greedy_ok=False) == FLOOR_NO_GREEDY
    assert temperature_problem(0.0, greedy_ok=False) == (
        "must be > 0 (greedy decoding, temperature 0, is not offered here), got 0.0")
    for bad in (-1.0, float("nan"), float("inf"), True, "0.7", None):
        assert temperature_problem(bad) == f"must be a finite number >= 0 (0: greedy decoding), got {bad!r}"


@pytest.mark.parametrize("T", [1e-5, 1e-38, 1e-40, 5e-324])
def test_python_api_refuses_below_the_floor(T):
    with pytest.raises(ValueError) as err:
        SamplingConfig(T)
    assert str(err.value) == f"temperature must be >= 0.0001 (float32 logits / T overflow below it; 0 is greedy decoding), got {T!r}"
    assert SamplingConfig(0).temperature == 0.0 and isinstance(SamplingConfig(0).temperature, float)


def _cli_error(argv, capsys) -> str:
    from spectr_gbv.cli import main as cli_main

    with pytest.raises(SystemExit) as exc:
        cli_main.build_parser().parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip()


def test_cli_flags_give_the_same_message(capsys):
    from spectr_gbv.cli import main as cli_main

    assert _cli_error(["generate", "--prompt", "hi", "--temperature", "1e-5"], capsys) == (
        "spectr-gbv generate: --temperature " + FLOOR)
    assert _cli_error(["bench", "--temperature", "1e-5"], capsys) == "spectr-gbv bench: --temperature " + FLOOR_NO_GREEDY
    assert _cli_error(["certify", "our-engine", "--draft-temperature", "1e-5"], capsys) == (
        "spectr-gbv certify our-engine: --draft-temperature " + FLOOR_NO_GREEDY)
    # generate takes 0 as greedy decoding
    args = cli_main.build_parser().parse_args(["generate", "--prompt", "hi", "--temperature", "0"])
    assert args.temperature == 0.0


def test_bench_sweep_check_gives_the_same_message():
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.cli.bench import check_temperatures

    with pytest.raises(UsageError) as err:
        check_temperatures([0.7, 1e-5])
    assert str(err.value) == "--temperature " + FLOOR_NO_GREEDY


def test_vllm_layout_adapter_gives_the_same_message():
    """At T = 1e-40 the adapter's softmax(logits / T) was NaN; now the request is refused."""
    from spectr_gbv.gpu_backend.adapters.vllm_layout import check_layout
    from spectr_gbv.gpu_backend.adapters.vllm_adapter import from_vllm_layout

    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    ids = torch.tensor([0])
    with pytest.raises(ValueError) as err:
        check_layout([1, 0], ids, None, logits, torch.tensor([1.0, 1e-40], dtype=torch.float64))
    assert str(err.value) == ("temperatures[1] must be >= 0.0001 (float32 logits / T overflow below it; "
                              "0 is greedy decoding), got 1e-40")
    with pytest.raises(ValueError) as err:
        check_layout([1, 0], ids, None, logits, [0.7, 1e-5])
    assert str(err.value) == "temperatures[1] " + FLOOR
    temps = check_layout([1, 0], ids, None, logits, [0.0, 1e-4])[4]
    assert temps.tolist() == [0.0, 1e-4]
    with pytest.raises(ValueError) as err:
        from_vllm_layout(lambda *a, **k: None, temperatures=(1.0, 1e-5))
    assert str(err.value) == "temperatures[1] " + FLOOR_NO_GREEDY


def test_floor_derivation_in_float32():
    """Overflow: logits of a real model (order 10–100) / 1e-38 leave float32 (the reported NaN
    rows); at the floor even |l| = 1e30 stays finite.  Underflow: float32 exp rounds to 0 below
    ln 2^-150 = −103.97, so at T = 1e-4 a token 0.0105 below the top already has probability 0,
    and at T = 1e-4 a bfloat16 row with logits in [2, 4) is the greedy row up to exact ties."""
    logits = torch.tensor([[30.0, 29.99, 1.0]])
    assert not bool(finite_rows(torch.softmax(logits / 1e-38, -1)).all())
    big = torch.tensor([[1e30, -1e30, 5.0]])
    assert bool(finite_rows(probabilities(big, SamplingConfig(MIN_TEMPERATURE))).all())
    assert math.isclose(math.log(2.0 ** -150), -103.97207708399179, rel_tol=0, abs_tol=1e-12)
    assert torch.exp(torch.tensor([-103.97, -103.98])).tolist() == [2 ** -149, 0.0]
    p = probabilities(torch.tensor([[1.0, 1.0 - 0.0105, 0.99]]), SamplingConfig(MIN_TEMPERATURE))
    # 0.0105 below the top: exactly 0; 0.01 below (x − max = −100 > −103.97): still positive
    assert p[0, 0].item() == 1.0 and p[0, 1].item() == 0.0 and 0.0 < p[0, 2].item() < 1e-43
    gen = torch.Generator().manual_seed(3)
    bf16 = (2 + 2 * torch.rand(500, 12, generator=gen)).to(torch.bfloat16)
    assert torch.equal(probabilities(bf16, SamplingConfig(MIN_TEMPERATURE)),
                       probabilities(bf16, SamplingConfig(1.0, top_k=1)))  # argmax, exact ties shared
