"""certify/endpoint/servers.py: each dialect's requests and its parse of answers.

The openai dialect is checked on answers recorded from vLLM 0.32.0's OpenAI server (CPU build,
SmolLM2-135M float32, 2026-12-05: fixtures/vllm_0.32.0_*.json), the llama.cpp dialect on answers
recorded from llama-server built from the llama.cpp vendored in llama-cpp-python 0.3.36's sdist
(the tiny GGUF, 2026-12-05: fixtures/llamacpp_0.3.36_*.json).  The sglang and tgi answers below
are written from those servers' documented schemas (SGLang's GenerateReqInput and meta_info;
TGI's /generate details with prefill and top_tokens), not recorded: no such server runs here.
"""

import json
import math
from pathlib import Path

import pytest

from spectr_gbv.certify.endpoint.servers import ProtocolError, dialect

FIX = Path(__file__).parent / "fixtures"


def _fix(name, server="vllm_0.32.0"):
    return json.loads((FIX / f"{server}_{name}.json").read_text())


def test_llamacpp_parses_llama_servers_recorded_answers():
    d = dialect("llama.cpp")
    assert d.parse_tokens(_fix("tokenize", "llamacpp_0.3.36")) == [504, 2644, 2643, 335, 260, 1171, 30]
    s = d.parse_sample(_fix("sample", "llamacpp_0.3.36"), 4)
    assert s.tokens == [198, 10591, 357, 31645]
    assert s.reported[:2] == pytest.approx([-1.5407066345214844, -10.909453392028809], abs=1e-12)
    prompt = [504, 2644, 3290, 335, 260, 2644, 30]
    top = d.parse_reference([_fix("reference_position0", "llamacpp_0.3.36"),
                             _fix("reference_position1", "llamacpp_0.3.36")], prompt, [198, 10591], 3)
    assert top.top_ids[0] == [198, 378, 216] and top.token_logprobs[0] == pytest.approx(-1.5407066345214844)
    assert top.token_logprobs[1] is None or top.token_logprobs[1] < -5  # outside the top 3 (own log-prob unknown)
    # the sampled token's log-prob at position 0 agrees with the reference's (same kernels, exact)
    assert s.reported[0] == top.token_logprobs[0]


def test_openai_sample_request_asks_ids_seed_and_plain_sampling():
    path, body = dialect("openai").sample_request("m", [1, 2], 4, 2**40 + 5, 0.7)
    assert path == "/v1/completions"
    assert body["prompt"] == [1, 2] and body["max_tokens"] == 4 and body["temperature"] == 0.7
    assert body["return_tokens_as_token_ids"] is True and body["logprobs"] == 1 and body["ignore_eos"] is True
    assert (body["top_p"], body["top_k"], body["min_p"]) == (1.0, -1, 0.0)
    assert 0 <= body["seed"] < 2**31 - 1  # servers take 32-bit seeds


def test_openai_parses_vllms_recorded_sample():
    s = dialect("openai").parse_sample(_fix("sample"), 4)
    assert s.tokens == [198, 29, 533, 2148]
    assert s.reported == pytest.approx([-1.4471850395202637, -2.867584228515625, -2.891299247741699,
                                        -4.290074348449707], abs=1e-12)


def test_openai_parses_vllms_recorded_echo():
    prompt, tokens = [504, 2644, 3290, 335, 260, 2644, 30], [378, 2644]
    top = dialect("openai").parse_reference([_fix("echo")], prompt, tokens, 3)
    assert top.short == 0
    # position 7 (token 378): the top 3 of the dict, most probable first; the token's own log-prob
    assert top.top_ids[0][0] == 198 and len(top.top_ids[0]) == 3
    assert top.token_logprobs == pytest.approx([-2.505094051361084, -1.1422818899154663], abs=1e-12)
    assert all(a >= b for a, b in zip(top.top_logprobs[0], top.top_logprobs[0][1:]))


def test_openai_echo_with_fewer_alternatives_than_asked_drops_to_cap_minus_one():
    # vLLM's entry holds the top k' plus the token itself when it is not among them: with k' < k the
    # cells must not depend on which, so they are the top k' - 1 (k' read off the prompt positions)
    prompt, tokens = [504, 2644, 3290, 335, 260, 2644, 30], [378, 2644]
    top = dialect("openai").parse_reference([_fix("echo")], prompt, tokens, 20)
    assert all(len(ids) == 2 for ids in top.top_ids) and top.short == 2


def test_openai_tokenize_and_model_name():
    d = dialect("openai")
    assert d.parse_tokens(_fix("tokenize")) == [504, 2644, 2643, 335, 260, 1171, 30]
    assert d.model_name(_fix("models")).endswith("smollm2-135m-instruct-b179c9523d0e-float32")


@pytest.mark.parametrize("answer,message", [
    ({}, "no choices"),
    ({"choices": [{"text": "hi", "logprobs": {"tokens": ["hi"]}}]}, "not a \"token_id:<id>\""),
    ({"choices": [{"text": "hi"}]}, "no token ids"),
    ({"choices": [{"logprobs": {"tokens": ["token_id:-3"]}}]}, "negative token id"),
    ({"choices": [{"logprobs": {"tokens": ["token_id:3"], "token_logprobs": [1, 2]}}]}, "2 entries for 1 tokens"),
])
def test_openai_bad_sample_answers_are_one_line(answer, message):
    with pytest.raises(ProtocolError, match=message):
        dialect("openai").parse_sample(answer, 4)


def test_openai_bad_echo_answers():
    d = dialect("openai")
    echo = _fix("echo")
    with pytest.raises(ProtocolError, match="not the id sent"):
        d.parse_reference([echo], [504, 2644, 3290, 335, 260, 2644, 30], [378, 7], 3)
    with pytest.raises(ProtocolError, match="covers"):
        d.parse_reference([echo], [504] * 20, [1], 3)
    with pytest.raises(ProtocolError, match="logprobs is missing"):
        d.parse_reference([{"choices": [{"text": ""}]}], [1], [2], 3)


SGLANG_REFERENCE = {"text": "", "meta_info": {
    "input_token_logprobs": [[-0.5, 11, None], [-2.0, 12, None]],
    "input_top_logprobs": [[[-0.5, 11, None], [-1.5, 3, None]], [[-0.2, 9, None], [-2.0, 12, None]]]}}


def test_sglang_requests_and_answers_from_its_documented_schema():
    d = dialect("sglang")
    path, body = d.sample_request("m", [1, 2], 3, 7, 1.0)
    assert path == "/generate" and body["input_ids"] == [1, 2]
    assert body["sampling_params"]["max_new_tokens"] == 3 and body["sampling_params"]["sampling_seed"] == 7
    s = d.parse_sample({"text": "", "output_ids": [5, 6], "meta_info": {
        "output_token_logprobs": [[-1.0, 5, None], [-0.5, 6, None]]}}, 3)
    assert s.tokens == [5, 6] and s.reported == [-1.0, -0.5]
    [(path, body)] = d.reference_requests("m", [1, 2], [11, 12], 2)
    assert body["logprob_start_len"] == 2 and body["top_logprobs_num"] == 2 and body["input_ids"] == [1, 2, 11, 12]
    top = d.parse_reference([SGLANG_REFERENCE], [1, 2], [11, 12], 2)
    assert top.top_ids == [[11, 3], [9, 12]] and top.token_logprobs == [-0.5, -2.0]
    with pytest.raises(ProtocolError, match="not the id sent"):
        d.parse_reference([SGLANG_REFERENCE], [1, 2], [11, 13], 2)


def test_llamacpp_requests_and_answers_from_its_documented_schema():
    d = dialect("llama.cpp")
    path, body = d.sample_request("m", [1, 2], 3, 7, 1.0)
    assert path == "/completion" and body["n_predict"] == 3 and body["return_tokens"] is True and body["top_k"] == 0
    s = d.parse_sample({"content": "ab", "tokens": [5, 6], "completion_probabilities": [
        {"id": 5, "logprob": -1.0, "top_logprobs": []}, {"id": 6, "logprob": -0.25, "top_logprobs": []}]}, 3)
    assert s.tokens == [5, 6] and s.reported == [-1.0, -0.25]
    calls = d.reference_requests("m", [1, 2], [5, 6], 2)
    assert [b["prompt"] for _, b in calls] == [[1, 2], [1, 2, 5]] and all(b["n_probs"] == 2 for _, b in calls)
    answers = [{"completion_probabilities": [{"id": 0, "top_logprobs": [{"id": 5, "logprob": -0.1}, {"id": 4, "logprob": -3.0}]}]},
               {"completion_probabilities": [{"id": 0, "top_logprobs": [{"id": 8, "logprob": -0.3}, {"id": 7, "logprob": -1.9}]}]}]
    top = d.parse_reference(answers, [1, 2], [5, 6], 2)
    assert top.top_ids == [[5, 4], [8, 7]] and top.token_logprobs == [-0.1, None]


def test_tgi_sends_text_and_checks_the_ids_it_read_back():
    d = dialect("tgi")
    d.prompt_texts[(1, 2)] = "Hello"
    path, body = d.sample_request("m", [1, 2], 3, 7, 1.0)
    assert path == "/generate" and body["inputs"] == "Hello" and body["parameters"]["details"] is True
    s = d.parse_sample({"generated_text": " wo", "details": {"tokens": [
        {"id": 5, "text": " w", "logprob": -1.0, "special": False}, {"id": 6, "text": "o", "logprob": -2.0, "special": False}]}}, 3)
    assert s.tokens == [5, 6] and s.texts == [" w", "o"]
    calls = d.reference_requests("m", [1, 2], [5, 6], 2, s.texts)
    assert [b["inputs"] for _, b in calls] == ["Hello", "Hello w"] and calls[0][1]["parameters"]["top_n_tokens"] == 2

    def answer(prefill, top):
        return {"details": {"prefill": [{"id": i, "text": "", "logprob": None} for i in prefill],
                            "top_tokens": [[{"id": i, "text": "", "logprob": lp, "special": False} for i, lp in top]]}}
    top = d.parse_reference([answer([1, 2], [(5, -0.5), (9, -1.0)]), answer([1, 2, 5], [(3, -0.1), (6, -2.5)])],
                            [1, 2], [5, 6], 2)
    assert top.top_ids == [[5, 9], [3, 6]] and top.token_logprobs == [-0.5, -2.5]
    with pytest.raises(ProtocolError, match="tokenized the text back"):
        d.parse_reference([answer([1, 3], [(5, -0.5)]), answer([1, 2, 5], [(3, -0.1)])], [1, 2], [5, 6], 2)
    with pytest.raises(ProtocolError, match="text prompts"):
        d.sample_request("m", [4], 3, 7, 1.0)


def test_unknown_dialect():
    with pytest.raises(ValueError, match="server must be one of"):
        dialect("ollama")


def test_nan_log_probability_is_refused():
    with pytest.raises(ProtocolError, match="NaN"):
        dialect("llama.cpp").parse_sample({"tokens": [1], "completion_probabilities": [{"id": 1, "logprob": math.nan}]}, 1)
