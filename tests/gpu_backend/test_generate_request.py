"""gpu_backend.generate.make_request: the library checks and resolves a generation before any
model is loaded, naming its own arguments (the command line passes its flags' names instead,
tests/cli/test_cli_bad_inputs.py)."""

import pytest

from spectr_gbv.gpu_backend.generate import make_request


@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": " "}, "prompt must not be empty"),
    ({"prompt": "a\udc80"}, r"prompt must be valid UTF-8 text \(character 1"),
    ({"rule": "nope"}, "rule: unknown rule 'nope'; known: ar, sd, spectr"),
    ({"rule": "sd", "K": 2}, "K must be 1 for the single-draft rule 'sd', got 2"),
    ({"rule": "sd", "L": 9, "max_new_tokens": 4}, "L 9: more than max_new_tokens 4 drafted tokens"),
    ({"rule": "sd", "K": 1, "L": 2, "recalibrate": True, "dtype": "float32"},
     "recalibrate: nothing is measured with auto=False, with both K and L given, or with rule ar"),
    ({"rule": "spectr_gbv", "stop_below": 0.5}, "stop_below"),
    ({"rule": "sd", "backend": "cuda"}, "backend must be one of auto, torch, llama.cpp"),
    ({"rule": "sd", "backend": "llama.cpp", "target": "some/folder"}, "backend llama.cpp"),
])
def test_refusals_name_the_argument(kwargs, message, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTR_GBV_AUTOCONFIG", str(tmp_path / "autoconfig.json"))
    kwargs = {"prompt": "hi", **kwargs}
    with pytest.raises(ValueError, match=message):
        make_request(kwargs.pop("prompt"), **kwargs)


def test_a_request_is_resolved_before_loading(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTR_GBV_AUTOCONFIG", str(tmp_path / "autoconfig.json"))
    req = make_request("def fib(n):", rule="sd", K=1, L=3, auto=False, dtype="float32", draft_quant="none")
    assert (req.rule, req.rule_given, req.backend, req.draft_quant) == ("sd", True, "torch", "none")
    assert (req.shape.K, req.shape.L, req.shape.auto) == (1, 3, False)
    plain = make_request("hi", rule="ar", dtype="float32")
    assert plain.draft_to_load is None and plain.rule == "ar"
    default = make_request("hi", dtype="float32", auto=False)
    assert default.rule == "spectr" and default.rule_given is False
