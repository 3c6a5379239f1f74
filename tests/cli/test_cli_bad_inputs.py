"""Every ``spectr-gbv`` sub-command refuses bad arguments and files with ONE line on stderr
naming the flag (and the file), exit status 2 and no traceback, before any model is loaded or
any enumeration, program or claim check starts.

The invocations run in-process through ``cli_main.main``; the model loaders, the exact
engine, the oracle programs, the claim runner, the certification and the benchmark are
replaced by functions that fail the test if they are reached.  Two invocations also run as a
subprocess of the console entry point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spectr_gbv.cli import main as cli_main
from spectr_gbv.gpu_backend.models import catalog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TOY = ["--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json")]
GiB = 2**30


def _reached(what):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} was reached: the bad argument was not refused up front")

    return fail


@pytest.fixture(autouse=True)
def nothing_heavy_runs(monkeypatch):
    """No model load, enumeration, program, claim run, certification or benchmark may start;
    the hub is offline and the memory available is a fixed 64 GiB (deterministic refusals)."""
    import spectr_gbv.gpu_backend.bench.run as bench_run
    import spectr_gbv.gpu_backend.engine.memory as memory
    import spectr_gbv.certify.verifiers.run as verifiers_run
    import spectr_gbv.gpu_backend.models.weights as weights
    import spectr_gbv.oracle.programs as programs
    import spectr_gbv.proofs_check.runner as prove_runner
    import spectr_gbv.reference.exact as exact

    monkeypatch.setattr(weights, "load_causal_lm", _reached("a model load"))
    # every model load goes through weights.load_causal_lm (model_pair.load_pair included)
    monkeypatch.setattr(bench_run, "run_bench", _reached("the benchmark"))
    monkeypatch.setattr(exact, "iteration_law", _reached("the exact enumeration"))
    for name in ("cic_program", "cic_block_program", "global_ot", "no_modification_lp"):
        monkeypatch.setattr(programs, name, _reached(f"oracle program {name}"))
    monkeypatch.setattr(prove_runner, "prove", _reached("the claim runner"))
    monkeypatch.setattr(verifiers_run, "certify_rules", _reached("the certification"))
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 64 * GiB)
    monkeypatch.setattr(catalog, "hub_reachable", _reached("a network probe"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def files(tmp_path):
    """Bad input files, named by placeholder."""
    made = {
        "bad": {"vocab_size": 2, "conditionals": {"": [0.7, 0.7]}},
        "short": {"vocab_size": 2, "conditionals": {"": [0.5, 0.5], "1": [1.0]}},
        "norows": {"vocab_size": 2, "conditionals": [0.5, 0.5]},
        "v3": {"vocab_size": 3, "conditionals": {"": [0.2, 0.3, 0.5]}},
    }
    paths = {}
    for name, obj in made.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(obj))
    paths["notjson"] = tmp_path / "notjson.json"
    paths["notjson"].write_text("{nope")
    paths["nofield"] = tmp_path / "nofield.jsonl"
    paths["nofield"].write_text('{"x": 1}\n')
    paths["empty"] = tmp_path / "empty.jsonl"
    paths["empty"].write_text("\n")
    paths["txt"] = tmp_path / "prompts.txt"
    paths["txt"].write_text("hello\n")
    paths["bignum"] = tmp_path / "bignum.json"  # an integer of 400 digits: too large for a float
    paths["bignum"].write_text('{"vocab_size":2,"conditionals":{"":[1,0],"1":[1' + "0" * 400 + ',0]}}')
    paths["deep"] = tmp_path / "deep.json"
    paths["deep"].write_text("[" * 100_000 + "]" * 100_000)
    paths["deepl"] = tmp_path / "deep.jsonl"
    paths["deepl"].write_text("[" * 100_000 + "]" * 100_000 + "\n")
    paths["dupkey"] = tmp_path / "dupkey.json"
    paths["dupkey"].write_text('{"vocab_size": 2, "conditionals": {"": [0.5, 0.5], "": [0.7, 0.3]}}')
    for name, key in (("key00", "00"), ("keyspace", " 0 "), ("keyarabic", "\u0661")):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps({"vocab_size": 2, "conditionals": {
            "": [0.5, 0.5], "0": [0.5, 0.5], key: [0.7, 0.3]}}))
    import gzip
    whole = gzip.compress(b'{"prompt": "hello"}\n' * 200)
    paths["truncgz"] = tmp_path / "trunc.jsonl.gz"
    paths["truncgz"].write_bytes(whole[: len(whole) // 2])
    paths["surrogate"] = tmp_path / "surrogate.jsonl"
    paths["surrogate"].write_text('{"prompt": "\\udcff"}\n')
    paths["v1"] = tmp_path / "v1.json"
    paths["v1"].write_text(json.dumps({"vocab_size": 1, "conditionals": {"": [1.0]}}))
    paths["dir"] = tmp_path
    paths["missing_dir"] = tmp_path / "no" / "such"
    return {k: str(v) for k, v in paths.items()}


# (argv, substrings the single line must contain); {name} is a file of the ``files`` fixture
CASES = [
    # top level
    (["nosuch"], ["invalid choice"]),
    # exact
    (["exact"], ["required", "--rule"]),
    (["exact", "--rule", "sd", "--K", "1", "--L", "1000", *TOY], ["--L 1000", "--max-outcomes", "~10^"]),
    (["exact", "--rule", "spectr", "--K", "8", "--L", "2", *TOY], ["--K 8", "--max-outcomes", "outcomes"]),
    (["exact", "--rule", "spectr", "--K", "1000000", "--L", "2", *TOY], ["--K 1000000", "--max-outcomes"]),
    (["exact", "--rule", "spectr", "--K", "2", "--L", "2", "--max-outcomes", "10", *TOY], ["--max-outcomes 10"]),
    (["exact", "--rule", "spectr", "--K", "2", "--L", "2", "--max-outcomes", "0", *TOY], ["--max-outcomes must be >= 1"]),
    (["exact", "--rule", "nosuch", "--K", "1", "--L", "1", *TOY], ["--rule", "'nosuch'", "spectr"]),
    (["exact", "--rule", "sd", "--K", "2", "--L", "2", *TOY], ["--K must be 1", "'sd'"]),
    (["exact", "--rule", "sd", "--K", "0", "--L", "2", *TOY], ["--K must be >= 1, got 0"]),
    (["exact", "--rule", "sd", "--K", "x", "--L", "2", *TOY], ["--K must be an integer"]),
    (["exact", "--rule", "sd", "--K", "1", "--L", "-1", *TOY], ["--L must be >= 1, got -1"]),
    (["exact", "--rule", "sd", "--K", "1", "--L", "2", "--tokens", "0", *TOY], ["--tokens must be >= 1"]),
    (["exact", "--rule", "sd", "--K", "1", "--L", "1", "--draft", "/nonexistent.json", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft", "/nonexistent.json"]),
    (["exact", "--rule", "sd", "--K", "1", "--L", "1", "--draft", "{dir}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft", "folder"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{bad}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {bad}:", "not normalised", "conditionals[()]"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", str(EXAMPLES / "toy_draft.json"),
      "--target", "{short}"], ["--target {short}:", "expected 2 probabilities"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{notjson}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {notjson}:", "not valid JSON"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{norows}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {norows}:", "conditionals must be an object"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{v3}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {v3}", "--target", "V = 3"]),
    # model files: numbers too large for a float, nesting too deep, keys listed twice or not canonical
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{bignum}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {bignum}:", "too large for a float"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", str(EXAMPLES / "toy_draft.json"),
      "--target", "{bignum}"], ["--target {bignum}:", "too large for a float"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{deep}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {deep}:", "nested too deeply"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{dupkey}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {dupkey}:", "key '' is listed twice"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{key00}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {key00}:", "key '00' is not a prefix key"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{keyspace}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {keyspace}:", "key ' 0 ' is not a prefix key"]),
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", "{keyarabic}", "--target",
      str(EXAMPLES / "toy_target.json")], ["--draft {keyarabic}:", "is not a prefix key"]),
    # V = 1: one decode state per length, but each carries a prefix of up to N tokens
    (["exact", "--rule", "bv", "--K", "1", "--L", "2", "--tokens", "10000", "--draft", "{v1}", "--target",
      "{v1}"], ["--K 1 --L 2 (N = 10000 tokens, V = 1)", "--max-outcomes"]),
    # huge integers: "too large", the value cut short
    (["exact", "--rule", "sd", "--K", "9" * 5000, "--L", "2", *TOY], ["--K is too large (5,000 digits)", "…"]),
    # oracle
    (["oracle", "--K", "2", "--L", "2", "--draft", "{bignum}", "--target", str(EXAMPLES / "toy_target.json")],
     ["--draft {bignum}:", "too large for a float"]),
    (["oracle", "--K", "2", "--L", "2", "--draft", str(EXAMPLES / "toy_draft.json"), "--target", "{deep}"],
     ["--target {deep}:", "nested too deeply"]),
    (["oracle", "--K", "1000", "--L", "2", *TOY], ["--K 1000", "--max-variables", "variables"]),
    (["oracle", "--K", "2", "--L", "30", *TOY], ["--L 30", "V^L", "--max-variables"]),
    (["oracle", "--K", "2", "--L", "2", "--time-limit", "0", *TOY], ["--time-limit must be > 0"]),
    (["oracle", "--K", "2", "--L", "2", "--time-limit", "-5", *TOY], ["--time-limit must be > 0"]),
    (["oracle", "--K", "2", "--L", "2", "--time-limit", "nan", *TOY], ["--time-limit must be a finite number"]),
    (["oracle", "--K", "0", "--L", "2", *TOY], ["--K must be >= 1"]),
    (["oracle", "--K", "2", "--L", "2", "--max-variables", "0", *TOY], ["--max-variables must be >= 1"]),
    (["oracle", "--K", "2", "--L", "2", "--draft", "{bad}", "--target", str(EXAMPLES / "toy_target.json")],
     ["--draft {bad}:", "not normalised"]),
    (["oracle", "--K", "2", "--L", "2", "--draft", str(EXAMPLES / "toy_draft.json"), "--target",
      "/nonexistent.json"], ["--target", "/nonexistent.json"]),
    # prove
    (["prove", "--claims", "nosuch"], ["--claims", "nosuch", "valid ids: "]),
    (["prove", "--no-tables", "--claims", "1,nosuch"], ["--claims", "nosuch", "valid ids"]),
    (["prove", "--claims", " , "], ["--claims", "at least one"]),
    (["prove", "--markdown", "{missing_dir}/v.md"], ["--markdown", "does not exist"]),
    (["prove", "--json", "{dir}"], ["--json", "is a folder"]),
    # certify
    (["certify", "verifiers", "--rules", "bv,nosuch"], ["--rules", "nosuch", "registered rules"]),
    (["certify", "verifiers", "--samples", "0"], ["--samples must be >= 2"]),
    (["certify", "verifiers", "--samples", "1"], ["--samples must be >= 2", "mean test"]),
    (["certify", "verifiers", "--device", "meta"], ["--device 'meta' is not usable"]),
    (["certify", "verifiers", "--device", "cuda:99"], ["--device 'cuda:99' is not usable"]),
    (["certify", "verifiers", "--alpha", "0"], ["--alpha must lie in (0, 1)"]),
    (["certify", "verifiers", "--alpha", "1"], ["--alpha must lie in (0, 1)"]),
    (["certify", "verifiers", "--threads", "0"], ["--threads must be >= 1"]),
    (["certify", "verifiers", "--seed", "-1"], ["--seed must be an integer in [0, 2^63)"]),
    (["certify", "verifiers", "--device", "nonsense"], ["--device 'nonsense' is not usable"]),
    (["certify", "verifiers", "--json", "{missing_dir}/c.json"], ["--json", "does not exist"]),
    # generate: models
    (["generate", "--prompt", "hi", "--target", "/nonexistent/model"], ["--target /nonexistent/model"]),
    (["generate", "--prompt", "hi", "--target", "someorg/somemodel"], ["--target someorg/somemodel", "offline"]),
    (["generate", "--prompt", "hi", "--draft", "a/b/c"], ["--draft a/b/c"]),
    (["generate", "--prompt", "hi", "--target", "{missing_dir}"], ["--target {missing_dir}"]),
    (["generate", "--prompt", "hi", "--target", "{dir}"], ["--target {dir}", "config.json"]),
    (["generate", "--prompt", "hi", "--target", "x.gguf"], ["--target x.gguf", ".gguf"]),
    (["generate", "--prompt", "hi", "--target", "{bad}"], ["--target {bad}", "not a .gguf model"]),
    (["generate", "--prompt", "hi", "--dtype", "int8"], ["--dtype must be auto or one of"]),
    (["generate", "--prompt", "hi", "--recalibrate", "--no-auto"], ["--recalibrate: nothing is measured"]),
    (["generate", "--prompt", "hi", "--recalibrate", "--K", "2", "--L", "3"], ["--recalibrate: nothing is measured"]),
    (["generate", "--prompt", "hi", "--recalibrate", "--rule", "ar"], ["--recalibrate: nothing is measured"]),
    (["generate", "--prompt", "hi", "--L", "9", "--max-new-tokens", "8"], ["--L 9: more than --max-new-tokens 8"]),
    (["generate", "--prompt", "hi", "--K", "9"], ["--K 9: above 8 the automatic configuration is not measured"]),
    (["generate", "--prompt", "hi", "--L", "33"], ["--L 33: above 32 the automatic configuration is not measured"]),
    (["generate", "--prompt", "hi", "--K", "3", "--no-auto", "--rule", "bv"], ["--K must be 1"]),
    # generate: numbers and names
    (["generate", "--prompt", "hi", "--threads", "-1"], ["--threads must be >= 1, got -1"]),
    (["generate", "--prompt", "hi", "--threads", "0"], ["--threads must be >= 1, got 0"]),
    (["generate", "--prompt", "hi", "--K", "100000", "--L", "4"], ["--K", "100,000", "GB", "memory available"]),
    (["generate", "--prompt", "hi", "--L", "100000000", "--K", "1", "--max-new-tokens", "200000000"], ["--L", "GB", "memory available"]),
    (["generate", "--prompt", ""], ["--prompt must not be empty"]),
    (["generate", "--prompt", "   "], ["--prompt must not be empty"]),
    (["generate", "--prompt", "hi", "--K", "0"], ["--K must be >= 1, got 0"]),
    (["generate", "--prompt", "hi", "--L", "-1"], ["--L must be >= 1, got -1"]),
    (["generate", "--prompt", "hi", "--rule", "nosuch"], ["--rule", "'nosuch'", "spectr"]),
    (["generate", "--prompt", "hi", "--rule", "sd", "--K", "2"], ["--K must be 1", "'sd'"]),
    (["generate", "--prompt", "hi", "--stop-below", "1.5"], ["--stop-below must be in [0, 1], got 1.5"]),
    (["generate", "--prompt", "hi", "--stop-below", "nan"], ["--stop-below must be a finite number"]),
    (["generate", "--prompt", "hi", "--rule", "gbv", "--stop-below", "0.4"],
     ["--stop-below", "'gbv'", "not certified lossless", "spectr"]),
    (["generate", "--prompt", "hi", "--rule", "ar", "--stop-below", "0.4"], ["--stop-below", "'ar' drafts nothing"]),
    (["generate", "--prompt", "hi", "--rule", "ar", "--draft-quant", "int8"], ["--draft-quant int8", "'ar' drafts nothing"]),
    (["generate", "--prompt", "hi", "--rule", "kseq_gbv", "--draft-quant", "int8"],
     ["--draft-quant int8", "'kseq_gbv'", "spectr"]),
    (["generate", "--prompt", "hi", "--draft-quant", "int4"], ["--draft-quant", "int4"]),
    (["generate", "--prompt", "hi", "--max-new-tokens", "0"], ["--max-new-tokens must be >= 1"]),
    # --temperature 0 is greedy decoding (accepted: tests/gpu_backend/engine/test_temperature_floor.py)
    (["generate", "--prompt", "hi", "--temperature", "-1"],
     ["--temperature must be a finite number >= 0 (0: greedy decoding), got -1.0"]),
    (["generate", "--prompt", "hi", "--temperature", "inf"], ["--temperature must be a finite number"]),
    (["generate", "--prompt", "hi", "--temperature", "1e-39"],
     ["--temperature must be >= 0.0001 (float32 logits / T overflow below it; 0 is greedy decoding), got 1e-39"]),
    (["generate", "--prompt", "caf\udce9"], ["--prompt must be valid UTF-8 text"]),
    (["generate", "--prompt", "hi", "--max-new-tokens", "9" * 5000], ["--max-new-tokens is too large", "…"]),
    (["generate", "--prompt", "hi", "--top-p", "0"], ["--top-p must be in (0, 1]"]),
    (["generate", "--prompt", "hi", "--top-p", "1.5"], ["--top-p must be in (0, 1]"]),
    (["generate", "--prompt", "hi", "--top-k", "-1"], ["--top-k must be >= 0"]),
    (["generate", "--prompt", "hi", "--seed", "-1"], ["--seed must be an integer in [0, 2^64), got -1"]),
    (["generate", "--prompt", "hi", "--seed", str(2**64)], [f"--seed must be an integer in [0, 2^64), got {2**64}"]),
    (["generate", "--prompt", "hi", "--unknown-flag"], ["unrecognized arguments", "--unknown-flag"]),
    (["generate"], ["required", "--prompt"]),
    # bench
    (["bench", "--dataset", "/nonexistent.jsonl"], ["--dataset /nonexistent.jsonl", "no such file"]),
    (["bench", "--dataset", "{nofield}"], ["--dataset {nofield}", "line 1"]),
    (["bench", "--dataset", "{empty}"], ["--dataset {empty}", "no prompts"]),
    (["bench", "--dataset", "{txt}"], ["--dataset {txt}", ".jsonl"]),
    (["bench", "--methods", "ar", "nosuch"], ["--methods", "nosuch", "hf_assisted"]),
    (["bench", "--methods", "sd", "spectr"], ["--methods must include ar"]),
    (["bench", "--top-p", "1.5"], ["--top-p must be in (0, 1]"]),
    (["bench", "--top-k", "-2"], ["--top-k must be >= 0"]),
    (["bench", "--K", "2", "0"], ["--K must be >= 1, got 0"]),
    (["bench", "--L", "0"], ["--L must be >= 1, got 0"]),
    (["bench", "--K", "100000"], ["--K", "GB", "memory available"]),
    (["bench", "--temperature", "0.7", "0"], ["--temperature must be > 0 (greedy decoding, temperature 0, is not offered here), got 0.0"]),
    (["bench", "--temperature", "0.7", "1e-39"], ["--temperature must be >= 0.0001 (float32 logits / T overflow below it), got 1e-39"]),
    (["bench", "--dataset", "{truncgz}"], ["--dataset {truncgz}:", "cut short"]),
    (["bench", "--dataset", "{deepl}"], ["--dataset {deepl}:", "line 1", "nested too deeply"]),
    (["bench", "--dataset", "{surrogate}"], ["--dataset {surrogate}:", "prompt 1 is not valid UTF-8"]),
    (["bench", "--prompts", "0"], ["--prompts must be >= 1"]),
    (["bench", "--max-new-tokens", "-3"], ["--max-new-tokens must be >= 1"]),
    (["bench", "--sweep-prompts", "0"], ["--sweep-prompts must be >= 1"]),
    (["bench", "--sweep", "nosuch"], ["--sweep", "invalid choice"]),
    (["bench", "--threads", "0"], ["--threads must be >= 1"]),
    (["bench", "--seed", "-1"], ["--seed must be an integer"]),
    (["bench", "--target", "/nonexistent/model"], ["--target /nonexistent/model"]),
    (["bench", "--draft", "someorg/somemodel"], ["--draft someorg/somemodel", "offline"]),
    (["bench", "--json", "{missing_dir}/b.json"], ["--json", "does not exist"]),
    (["bench", "--runs-json", "{dir}"], ["--runs-json", "is a folder"]),
    (["bench", "--plots", "{bad}"], ["--plots", "is a file"]),
    # report
    (["report", "--out", "{bad}"], ["--out", "is a file"]),
    (["report", "--prompts", "0"], ["--prompts must be >= 1"]),
    (["report", "--max-new-tokens", "0"], ["--max-new-tokens must be >= 1"]),
    (["report", "--threads", "0"], ["--threads must be >= 1"]),
    (["report", "--dtype", "int4"], ["--dtype must be auto or one of"]),
    (["report", "--skip", "nosuch"], ["--skip", "invalid choice"]),
    (["report", "--target", "/nonexistent/model"], ["--target /nonexistent/model"]),
]


def _fill(text: str, files: dict) -> str:
    for name, path in files.items():
        text = text.replace("{" + name + "}", path)
    return text


def run_main(argv, capsys):
    try:
        code = cli_main.main(argv)
    except SystemExit as exc:  # main returns the status, but a SystemExit would be one too
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code, out, err, sub, expected):
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"spectr-gbv {sub}: " if sub else "spectr-gbv"), lines[0]
    for part in expected:
        assert part in lines[0], (part, lines[0])
    assert out == ""


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_invocation_is_one_line_exit_2(argv, expected, files, capsys):
    argv = [_fill(a, files) for a in argv]
    expected = [_fill(e, files) for e in expected]
    code, out, err = run_main(argv, capsys)
    sub = argv[0] if argv[0] in cli_main.SUBCOMMANDS else ""
    if sub == "certify":  # a certify sub-command names itself: "spectr-gbv certify verifiers: …"
        sub = f"certify {argv[1]}"
    assert_one_line(code, out, err, sub, expected)


def test_empty_prefix_row_is_not_shown_as_a_row_index(files, capsys):
    code, out, err = run_main(["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", files["bad"],
                               "--target", str(EXAMPLES / "toy_target.json")], capsys)
    assert code == 2 and "row (0,)" not in err and "they sum to 1.4" in err


def test_hub_id_without_network_is_refused_in_one_line(monkeypatch, capsys):
    """With the hub online but unreachable, the network probe refuses the id up front."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(catalog, "hub_reachable", lambda timeout=3.0: False)
    code, out, err = run_main(["generate", "--prompt", "hi", "--target", "someorg/somemodel"], capsys)
    assert_one_line(code, out, err, "generate", ["--target someorg/somemodel", "cannot be reached"])


@pytest.fixture
def torch_threads():
    import torch

    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("failing,flag", [("target", "--target"), ("draft", "--draft")])
def test_model_load_failure_names_the_flag(failing, flag, monkeypatch, capsys, torch_threads):
    """A model that passes the up-front checks but fails to load (e.g. a multi-line hub error)
    is still one line naming its flag."""
    import spectr_gbv.gpu_backend.models.weights as weights

    def load(spec, dtype):
        if spec == failing:
            raise OSError(f"spec={spec!r}: could not load\nsecond line of a long library error\nthird")
        return object(), object()

    monkeypatch.setattr(weights, "load_causal_lm", load)
    code, out, err = run_main(["generate", "--prompt", "hi", "--target", "target", "--draft", "draft",
                               "--threads", "1", "--backend", "torch"], capsys)
    assert_one_line(code, out, err, "generate", [f"{flag} {failing}: cannot load the model", "could not load"])
    assert "second line" not in err


@pytest.mark.parametrize("failing", ["target", "draft"])
def test_llamacpp_model_load_failure_names_the_flag(failing, monkeypatch, capsys, torch_threads):
    """The same on the llama.cpp backend (``generate``'s default for the embedded GGUF models):
    a GGUF that llama.cpp cannot load is one line naming its flag."""
    import spectr_gbv.gpu_backend.llamacpp.pair as lp

    real = lp.gguf_path

    def gguf_path(spec):
        if spec == failing:
            raise OSError(f"spec={spec!r}: could not load\nsecond line of a long library error")
        return real(spec)

    monkeypatch.setattr(lp, "gguf_path", gguf_path)
    code, out, err = run_main(["generate", "--prompt", "hi", "--target", "target", "--draft", "draft",
                               "--threads", "1", "--backend", "llama.cpp"], capsys)
    assert_one_line(code, out, err, "generate", [f"--{failing} {failing}: cannot load the model", "could not load"])
    assert "second line" not in err


@pytest.mark.parametrize("argv,needle", [
    (["exact", "--rule", "sd", "--K", "1", "--L", "1000", *TOY], "--max-outcomes"),
    (["generate", "--prompt", "hi", "--threads", "-1"], "--threads must be >= 1, got -1"),
])
def test_console_entry_point_exit_2_one_line(argv, needle):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "spectr_gbv.cli.main", *argv], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("argv", [
    ["exact", "--rule", "kseq_gbv", "--K", "2", "--L", "2", *TOY],
    ["exact", "--rule", "spectr", "--K", "2", "--L", "3", "--tokens", "5", *TOY],
    ["oracle", "--K", "2", "--L", "2", *TOY],
    ["prove", "--quick", "--claims", "1,2a"],
    ["generate", "--prompt", "def fib(n):"],
    ["generate", "--prompt", "hi", "--rule", "sd", "--top-k", "0", "--top-p", "1"],
    ["generate", "--prompt", "hi", "--rule", "ar", "--draft", "/ignored/for/ar"],
    ["bench", "--quick", "--methods", "ar", "sd", "mdbv"],
    ["report", "--skip", "prove", "certify"],
])
def test_the_checks_accept_good_invocations(argv):
    """The up-front checks do not refuse the documented runs (only the checks run here)."""
    args = cli_main.build_parser().parse_args(argv)
    args.check(args)
