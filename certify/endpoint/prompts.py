"""The prompts of a deployment certification: the shipped default set, or a JSONL file.

Sample i uses prompt i mod P.  A prompt is text (tokenized once, by the server's own tokenizer
where it has one, else the local reference's) or token ids.  The default set mixes code, prose,
lists, dialogue and arithmetic, and repeats itself in places so that n-gram (prompt lookup)
speculation finds drafts to verify.
"""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_PROMPTS = (
    "The cat sat on the mat. The dog sat on the rug. The cat sat on the mat. The dog sat on the",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\ndef",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,",
    "Q: What is 12 times 7?\nA: 84.\nQ: What is 9 times 8?\nA:",
    "Once upon a time, in a small village by the sea, there lived",
    "User: Can you recommend a book about the history of science?\nAssistant:",
    "import numpy as np\n\nx = np.arange(10)\ny = x ** 2\nprint(",
    "The three primary colours are red, yellow and blue. The three secondary colours are",
)
TEXT_KEYS = ("text", "prompt", "instruction")
ID_KEYS = ("ids", "token_ids", "input_ids")


def load_prompts(path) -> list:
    """The prompts of a JSONL file: one object per line with text under one of ``TEXT_KEYS`` or
    token ids under one of ``ID_KEYS`` (blank lines skipped).

    Returns:
        a list whose entries are ``str`` (text) or ``list[int]`` (ids).
    Raises:
        ValueError: a missing or empty file, a line that is not such an object (its number named),
            empty text or ids, a negative or non-integer id.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--prompts {path}: cannot be read ({err.__class__.__name__})") from None
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise ValueError(f"--prompts {path}: line {n} is not JSON") from None
        if not isinstance(obj, dict):
            raise ValueError(f"--prompts {path}: line {n} must be an object with one of {TEXT_KEYS + ID_KEYS}")
        text = next((obj[k] for k in TEXT_KEYS if k in obj), None)
        ids = next((obj[k] for k in ID_KEYS if k in obj), None)
        if ids is not None:
            if (not isinstance(ids, list) or not ids
                    or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)):
                raise ValueError(f"--prompts {path}: line {n}: token ids must be a non-empty list of integers ≥ 0")
            out.append([int(t) for t in ids])
        elif isinstance(text, str) and text:
            out.append(text)
        else:
            raise ValueError(f"--prompts {path}: line {n} has no non-empty text ({', '.join(TEXT_KEYS)}) "
                             f"or ids ({', '.join(ID_KEYS)})")
    if not out:
        raise ValueError(f"--prompts {path}: no prompt in the file")
    return out
