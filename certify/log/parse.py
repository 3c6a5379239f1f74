"""One log line → its samples and the law each asks for, or a counted skip with its reason.

A line is one JSON object ``{"request": BODY, "response": ANSWER}``: BODY the ``/v1/completions``
request as sent (its sampling fields define the law: ``temperature`` (default 1), ``top_p``
(default 1), ``top_k`` (default none; −1 and 0 mean none), ``min_p`` (default 0), ``logprobs``: k),
ANSWER the server's answer: every ``choices[i]`` is one sample, read from ``choices[i].logprobs``
(``tokens``, ``token_logprobs``, ``top_logprobs``: one dict token → log-probability a position).
Tokens are vLLM's ``"token_id:N"`` strings (``return_tokens_as_token_ids``), else text: a text
token is identified by a 32-bit hash of its UTF-8 bytes (two tokens of one text are one cell; the
id order of the PIT is then the hash order, fixed before sampling).  Each top list is cut to the
request's k most probable entries (probability descending, ties by id: a server that appends the
sampled token when it is outside its top k, as vLLM and OpenAI do, has it dropped again) when the
chunk's arrays are built.

Skipped and counted (``SAMPLE_SKIPS``), never an error: a line that is not such an object, a
request that asked for no log-probabilities or an answer without them, greedy decoding
(temperature 0), penalties, logit bias, beam search or best-of, echo, structured output, a
position without its top list.  The request's defaults are the OpenAI API's: a server that changes
them (vLLM's ``--override-generation-config``, a generation config) is certified against what the
client asked for, which is the point.

A line is decoded by msgspec when it is installed (a base dependency: ~4× faster than the stdlib's
``json``), else by ``json``; msgspec refuses whatever it would read otherwise than ``json`` (NaN and
Infinity, floats beyond the float64 range, lone surrogates), and such a line goes to ``json``: the
value is ``json.loads``' in either case (tests/certify/log/test_certify_log.py compares the tallies
of both).
"""

from __future__ import annotations

import itertools
import json
import math
import zlib
from dataclasses import dataclass

import numpy as np

try:  # the fast decoder (module doc); without it every line goes to json
    import msgspec

    _FAST_DECODE = msgspec.json.Decoder().decode
    _FAST_REFUSED = msgspec.DecodeError  # ValidationError (a float out of range) is a DecodeError
except ImportError:  # pragma: no cover - msgspec is a base dependency
    _FAST_DECODE, _FAST_REFUSED = None, ()

# why a whole sample (or line) is skipped
SAMPLE_SKIPS = {
    "json": "not a JSON object with request and response",
    "nologprobs": "no log-probabilities (the request asked for none, or the answer has none)",
    "greedy": "greedy decoding (temperature 0): a point mass, no law to test",
    "penalties": "presence, frequency or repetition penalties (the reported raw law does not give the penalised one)",
    "bias": "logit bias or allowed/bad token lists",
    "beam": "beam search or best_of > n",
    "echo": "echo (the prompt's log-probabilities in the answer)",
    "structured": "structured output (guided decoding, response_format)",
    "shape": "log-probabilities of another shape (a position without its top list, lengths that disagree)",
    "params": "sampling fields out of range (temperature < 0, top_p outside (0, 1], top_k < -1, min_p outside [0, 1))",
    "error": "an error answer (no choices)",
}
# the report's text of every key a tally counts skipped samples by
SKIP_TEXT = SAMPLE_SKIPS | {"topk sum": "a reported top-k list sums above 1 (not a law)"}
_STRUCTURED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "response_format",
               "structured_outputs", "grammar", "json_schema")


@dataclass
class Sample:
    """One sampled continuation of a log (module doc).

    Attributes:
        line: its line (0-based, in the whole log); choice: its index in ``choices``.
        x: its token ids (int64 array); lpx: each token's own reported log-probability (NaN: not
        reported).
        ids, lps: every position's top list as sent, flattened (ids an int64 array); lens: each
        list's length; k: the request's ``logprobs`` (each list is cut to its k most probable
        entries, ties by id, when the arrays are built: ``run.chunk_records``).
        beta: 1/T; top_k (0: none), top_p (1: none), min_p (0: none).
        text: the tokens are text (hashed ids, which may collide: checked), not token ids.
    """

    line: int
    choice: int
    x: list
    lpx: list
    ids: list
    lps: list
    lens: list
    k: int
    beta: float
    top_k: int
    top_p: float
    min_p: float
    text: bool = False


def _tid(s) -> int:
    if isinstance(s, str):
        if s.startswith("token_id:"):
            return int(s[9:])
        return zlib.crc32(s.encode("utf-8", "surrogatepass"))
    return int(s)


def _num(v, default):
    return default if v is None else float(v)


def decode(text):
    """The JSON value of one line (bytes or str): ``json.loads``' value, by msgspec when it is
    installed and accepts the line (module doc).

    Raises:
        ValueError: not JSON (UnicodeDecodeError, a ValueError, for bytes that are not UTF-8).
    """
    if _FAST_DECODE is not None:
        try:
            return _FAST_DECODE(text)
        except _FAST_REFUSED:
            pass
    # bytes decoded here: json.loads' own encoding detection costs more than the decode
    return json.loads(text.decode("utf-8") if isinstance(text, (bytes, bytearray)) else text)


_BIG = 2**31 - 1


def parse_line(text: str, line: int) -> tuple[list, list]:
    """The samples of one log line and the skip keys (``SAMPLE_SKIPS``) of its choices not taken.

    Args:
        text: the line (JSON); line: its number in the whole log.
    Returns:
        (samples, skips): ``Sample``s, and one key of ``SAMPLE_SKIPS`` per sample (or line)
        skipped.
    """
    try:
        obj = decode(text)
        req, resp = obj["request"], obj["response"]
        if not isinstance(req, dict) or not isinstance(resp, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
        return [], ["json"]
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices:
        return [], ["error"]
    n = len(choices)
    k = req.get("logprobs")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return [], ["nologprobs"] * n
    try:
        T = _num(req.get("temperature"), 1.0)
        top_p = _num(req.get("top_p"), 1.0)
        top_k = int(req.get("top_k") if req.get("top_k") is not None else -1)
        min_p = _num(req.get("min_p"), 0.0)
    except (TypeError, ValueError):
        return [], ["params"] * n
    if not (T >= 0 and 0 < top_p <= 1 and top_k >= -1 and 0 <= min_p < 1) or not math.isfinite(T):
        return [], ["params"] * n
    if T == 0:
        return [], ["greedy"] * n
    if (_num(req.get("presence_penalty"), 0.0) != 0 or _num(req.get("frequency_penalty"), 0.0) != 0
            or _num(req.get("repetition_penalty"), 1.0) != 1):
        return [], ["penalties"] * n
    if req.get("logit_bias") or req.get("allowed_token_ids") or req.get("bad_words"):
        return [], ["bias"] * n
    if req.get("use_beam_search") or (req.get("best_of") or 1) > int(req.get("n") or 1):
        return [], ["beam"] * n
    if req.get("echo"):
        return [], ["echo"] * n
    if any(req.get(f) for f in _STRUCTURED):
        return [], ["structured"] * n
    # a list is cut to its k most probable entries and a top-k of V or more cuts nothing: values past
    # 2^31 - 1 (beyond any vocabulary) mean the same and fit the int64 arrays
    k, top_k = min(k, _BIG), min(top_k, _BIG)
    beta = 1.0 / T
    out, skips = [], []
    for ci, ch in enumerate(choices):
        lp = ch.get("logprobs") if isinstance(ch, dict) else None
        if not isinstance(lp, dict) or not lp.get("top_logprobs"):
            skips.append("nologprobs")
            continue
        toks, own, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp["top_logprobs"]
        if len(toks) != len(tops) or (own and len(own) != len(toks)):
            skips.append("shape")
            continue
        try:
            s = _sample(line, ci, toks, own, tops, k, beta, top_k, top_p, min_p)
        except (TypeError, ValueError, AttributeError):
            s = None
        if s is None:
            skips.append("shape")
        else:
            out.append(s)
    return out, skips


def _ids(keys: list) -> np.ndarray:
    """Token ids of ``"token_id:N"`` strings (one numpy parse for the whole list), else of text
    tokens (their 32-bit hashes, module doc)."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    joined = ",".join(keys)
    digits = joined.replace("token_id:", "")
    if len(joined) - len(digits) == 9 * len(keys):  # as many "token_id:" as keys
        # a malformed id stops the parse early (numpy warns once): the length check below refuses it
        ids = np.fromstring(digits, dtype=np.int64, sep=",")
        if ids.size == len(keys):
            return ids
        raise ValueError("a token_id key that is not an integer")
    return np.fromiter((_tid(t) for t in keys), dtype=np.int64, count=len(keys))


def _sample(line, ci, toks, own, tops, k, beta, top_k, top_p, min_p):
    lens = [len(d) for d in tops]
    if not all(lens) or not all(isinstance(d, dict) for d in tops):
        return None
    x = _ids(toks)
    lpx = [math.nan if v is None else float(v) for v in own] if own else [math.nan] * len(toks)
    keys = list(itertools.chain.from_iterable(tops))
    ids = _ids(keys)
    lps = list(itertools.chain.from_iterable(map(dict.values, tops)))  # every d is a dict (checked above)
    text = not (keys and keys[0].startswith("token_id:"))
    return Sample(line, ci, x, lpx, ids, lps, lens, k, beta, top_k if top_k > 0 else 0, top_p, min_p, text)
