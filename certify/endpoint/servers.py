"""Each server's request and response shapes ("dialects"): how to ask for one seeded sample as
token ids, and how to ask for the target's top-k log-probabilities along a given continuation.

Speculation never touches a prefill: a request whose prompt is the original prompt plus a sampled
continuation returns, at every position of the continuation, the target's own log-probabilities
of the token that is there and of its k most probable alternatives.  That is the reference
``self`` (``references.ServerReference``).  The four dialects:

- ``openai`` — the OpenAI completions API as vLLM serves it (``POST /v1/completions``): samples
  with ``prompt`` as token ids, ``seed``, ``logprobs: 1`` and ``return_tokens_as_token_ids``
  (vLLM's extension: ``"token_id:<id>"`` strings) or ``choices[0].token_ids``; the reference with
  ``echo: true, logprobs: k, max_tokens: 1``.  vLLM's prompt log-probabilities are the raw
  log-softmax of the logits (before temperature and truncation: vLLM 0.32's
  ``gpu_model_runner._get_prompt_logprobs_dict``), its sampled tokens' log-probabilities too by
  default (``--logprobs-mode raw_logprobs``); k is capped by the server's ``--max-logprobs``
  (default 20).
- ``sglang`` — SGLang's native ``POST /generate``: ``input_ids``, ``sampling_params`` with
  ``sampling_seed``; the reference with ``return_logprob``, ``logprob_start_len`` = the prompt's
  length, ``top_logprobs_num: k``, ``max_new_tokens: 0`` (``meta_info.input_token_logprobs`` and
  ``input_top_logprobs``: ``[logprob, token id, text]`` per position from ``logprob_start_len``).
- ``tgi`` — Hugging Face text-generation-inference's ``POST /generate``: its inputs are text, so
  the prompt and the continuation go through the server's ``/tokenize`` and the ids it gives back
  are checked; samples with ``details: true`` (``details.tokens[].id``); the reference needs one
  request per position (``top_n_tokens: k``, ``max_new_tokens: 1``), since TGI's prefill details
  (``decoder_input_details``) give each token's own log-probability but no alternatives.
- ``llama.cpp`` — llama.cpp's ``llama-server`` native ``POST /completion``: ``prompt`` as ids,
  ``n_predict``, ``seed``, ``n_probs``, ``return_tokens``; the reference one request per position
  (``n_predict: 1, n_probs: k``; the server keeps the shared prefix in its cache), since it
  returns no prompt log-probabilities.  No ``ignore_eos``: llama-server implements it as a logit
  bias of −∞ on the end-of-generation tokens, which changes the law; a sample that stops at its
  end-of-generation token keeps that token (an early stop, counted in the report).

Every parse raises ``ProtocolError`` (one line naming the field) on an answer that does not
have the documented shape.  The openai and llama.cpp dialects are tested on answers recorded from
vLLM's server and llama-server (tests/certify/endpoint/fixtures/); sglang and tgi
on answers written from their documented schemas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class ProtocolError(ValueError):
    """An answer without the dialect's documented shape (one line)."""


@dataclass
class Sample:
    """What the engine emitted for one request.

    Attributes:
        tokens: the sampled token ids.
        reported: the engine's reported log-probability of each sampled token (raw: before
            temperature, as the dialect's ``reports_raw``), or None when it reports none.
        texts: each token's text where the dialect needs it (TGI: its inputs are text).
        top: the top-k lists the answer reported at each sampled position (``TopLaws``; the
            OpenAI dialect with ``logprobs: k``: ``--reference reported``), or None.
    """

    tokens: list
    reported: list | None = None
    texts: list | None = None
    top: object = None


@dataclass
class TopLaws:
    """The reference's view of one continuation: at each position t, the ids and log-probabilities
    of its k most probable tokens (``top_ids[t]``, ``top_logprobs[t]``), and the log-probability of
    the token that is there (``token_logprobs[t]``, None when not given); ``short``: positions
    where fewer than k alternatives came back."""

    top_ids: list
    top_logprobs: list
    token_logprobs: list
    short: int = 0

    def cut(self, k: int) -> None:
        """Keep each position's k most probable entries (probability descending, ties by id)."""
        for t in range(len(self.top_ids)):
            ids, lps, _ = _top_k(list(zip(self.top_ids[t], self.top_logprobs[t])), k)
            self.top_ids[t], self.top_logprobs[t] = ids, lps


def _seed(seed: int) -> int:
    return int(seed) % (2**31 - 1)


def _float(x, what: str) -> float:
    if x is None:
        raise ProtocolError(f"{what} is missing")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ProtocolError(f"{what} is not a number: {x!r}") from None
    if math.isnan(v):
        raise ProtocolError(f"{what} is NaN")
    return v


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        raise ProtocolError(f"{what} is not a token id: {x!r}")
    try:
        v = int(x)
    except ValueError:
        raise ProtocolError(f"{what} is not a token id: {x!r}") from None
    if v < 0:
        raise ProtocolError(f"{what} is a negative token id: {v}")
    return v


def _token_id(s, what: str) -> int:
    """``"token_id:123"`` (vLLM's ``return_tokens_as_token_ids``) → 123."""
    if isinstance(s, str) and s.startswith("token_id:"):
        return _int(s.split(":", 1)[1], what)
    raise ProtocolError(f"{what} is {s!r}, not a \"token_id:<id>\" string (the server ignored "
                        "return_tokens_as_token_ids: it returns text, which cannot be mapped back to ids)")


def _top_k(pairs, k: int) -> tuple[list, list, bool]:
    """The k most probable of ``(id, logprob)`` pairs (probability descending, ties by id), and
    whether fewer than k came back."""
    pairs = sorted(pairs, key=lambda p: (-p[1], p[0]))
    return [p[0] for p in pairs[:k]], [p[1] for p in pairs[:k]], len(pairs) < k


class Dialect:
    """A server's request and response shapes (module doc).

    Attributes:
        name: the dialect's name; probe_paths: GET paths that answer on a live server (the first
        that answers tells the server is up); reports_raw: sampled log-probabilities are before
        temperature; per_position: the reference takes one request per position.
    """

    name = ""
    probe_paths: tuple = ()
    reports_raw = True
    per_position = False

    def sample_request(self, model: str, prompt_ids, n: int, seed: int, temperature: float) -> tuple[str, dict]:
        raise NotImplementedError

    def parse_sample(self, answer: dict, n: int) -> Sample:
        raise NotImplementedError

    def reference_requests(self, model: str, prompt_ids, tokens, k: int, texts=None) -> list:
        """``[(path, body), …]`` asking the top k along ``tokens`` after ``prompt_ids`` (``texts``:
        the tokens' texts, for dialects whose inputs are text)."""
        raise NotImplementedError

    def tokenize_request(self, model: str, text: str) -> tuple[str, dict]:
        """``(path, body)`` asking the server to tokenize ``text`` as it tokenizes a prompt."""
        raise NotImplementedError

    def parse_tokens(self, answer) -> list[int]:
        """The ids of a tokenize answer."""
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not tokens:
            raise ProtocolError("the tokenize answer has no tokens")
        return [_int(t["id"] if isinstance(t, dict) else t, f"tokens[{i}]") for i, t in enumerate(tokens)]

    def parse_reference(self, answers: list, prompt_ids, tokens, k: int) -> TopLaws:
        raise NotImplementedError

    def model_name(self, probe_answer) -> str | None:
        """The served model's name from the probe's answer (OpenAI ``/v1/models``), or None."""
        try:
            return str(probe_answer["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            return None


class OpenAIDialect(Dialect):
    name = "openai"
    probe_paths = ("/v1/models",)

    def sample_request(self, model, prompt_ids, n, seed, temperature, logprobs: int = 1, top_p: float = 1.0,
                       top_k: int = 0, min_p: float = 0.0):
        """Every sampling field sent (the declared law: ``temperature``, ``top_p``, ``top_k`` (0:
        none, sent as −1), ``min_p``); ``logprobs``: the top-k lists asked per sampled position."""
        return "/v1/completions", {
            "model": model, "prompt": [int(t) for t in prompt_ids], "max_tokens": int(n),
            "temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k) if top_k > 0 else -1,
            "min_p": float(min_p),
            "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
            "seed": _seed(seed), "logprobs": int(logprobs), "return_tokens_as_token_ids": True, "ignore_eos": True}

    def client_request(self, model, prompt_ids, n, seed, logprobs: int = 1, template: dict | None = None):
        """``--as-client``: the request as the client sends it — the fields of ``template`` (a
        JSON body; None: no sampling field at all) with ``model`` (unless the template names one),
        ``prompt``, ``max_tokens``, ``seed`` and ``logprobs`` filled in, plus
        ``return_tokens_as_token_ids`` (token ids back) and ``ignore_eos`` (a fixed length),
        which change no sampling law."""
        body = dict(template or {})
        body.setdefault("model", model)
        body.update({"prompt": [int(t) for t in prompt_ids], "max_tokens": int(n), "seed": _seed(seed),
                     "logprobs": int(logprobs), "return_tokens_as_token_ids": True, "ignore_eos": True})
        body.pop("echo", None)
        body.pop("stream", None)
        return "/v1/completions", body

    def parse_sample(self, answer, n):
        choice = _choice(answer)
        logprobs = choice.get("logprobs") or {}
        if choice.get("token_ids") is not None:
            tokens = [_int(t, f"choices[0].token_ids[{i}]") for i, t in enumerate(choice["token_ids"])]
        elif logprobs.get("tokens"):
            tokens = [_token_id(t, f"choices[0].logprobs.tokens[{i}]") for i, t in enumerate(logprobs["tokens"])]
        else:
            raise ProtocolError("choices[0] holds no token ids (neither token_ids nor logprobs.tokens)")
        reported = logprobs.get("token_logprobs")
        if reported is not None:
            if len(reported) != len(tokens):
                raise ProtocolError(f"choices[0].logprobs.token_logprobs has {len(reported)} entries for "
                                    f"{len(tokens)} tokens")
            reported = [None if v is None else _float(v, f"token_logprobs[{i}]") for i, v in enumerate(reported)]
        return Sample(tokens, reported, top=self._sample_top(logprobs.get("top_logprobs"), len(tokens)))

    @staticmethod
    def _sample_top(tops, n: int):
        """The answer's top-k lists (``TopLaws``; None when it sent none).  vLLM adds the sampled
        token to its position's list when it is not among the top k: the lists are cut to the
        size of the smallest one (fixed before the token is drawn, as ``parse_reference``)."""
        if not tops or not isinstance(tops, list) or all(not t for t in tops):
            return None
        if len(tops) != n:
            raise ProtocolError(f"choices[0].logprobs.top_logprobs has {len(tops)} entries for {n} tokens")
        for t, d in enumerate(tops):
            if not isinstance(d, dict) or not d:
                raise ProtocolError(f"choices[0].logprobs.top_logprobs[{t}] is empty")
        cells = min(len(d) for d in tops)
        out = TopLaws([], [], [])
        for t, d in enumerate(tops):
            pairs = [(_token_id(key, f"top_logprobs[{t}] key"), _float(v, f"top_logprobs[{t}]")) for key, v in d.items()]
            ids, lps, _ = _top_k(pairs, cells)
            out.top_ids.append(ids)
            out.top_logprobs.append(lps)
            out.token_logprobs.append(None)
        return out

    def tokenize_request(self, model, text):
        return "/tokenize", {"model": model, "prompt": text}

    def reference_requests(self, model, prompt_ids, tokens, k, texts=None):
        return [("/v1/completions", {
            "model": model, "prompt": [int(t) for t in prompt_ids] + [int(t) for t in tokens],
            "max_tokens": 1, "temperature": 1.0, "echo": True, "logprobs": int(k),
            "return_tokens_as_token_ids": True})]

    def parse_reference(self, answers, prompt_ids, tokens, k):
        choice = _choice(answers[0])
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            raise ProtocolError("choices[0].logprobs is missing (the server does not return prompt log-probs "
                                "with echo: true)")
        P, n = len(prompt_ids), len(tokens)
        echoed, tops, own = lp.get("tokens") or [], lp.get("top_logprobs") or [], lp.get("token_logprobs") or []
        if len(echoed) < P + n or len(tops) < P + n or len(own) < P + n:
            raise ProtocolError(f"the echo covers {min(len(echoed), len(tops), len(own))} positions, not the "
                                f"{P + n} of prompt and continuation")
        # vLLM's entry j holds the top k' and the token at j when it is not among them.  A server
        # that caps k' below the k asked gives k' or k' + 1 entries: the cells must not depend on
        # which, so k' is read off the prompt's positions (fixed before any sample) and the cells
        # are then the top k' − 1 (module doc of oracle.sequence_records: cells chosen before x).
        sizes = [len(tops[j]) for j in range(1, P) if isinstance(tops[j], dict) and tops[j]]
        if not sizes:
            sizes = [len(tops[P + t]) for t in range(n) if isinstance(tops[P + t], dict) and tops[P + t]]
        cap = min(sizes) if sizes else k
        cells = k if cap >= k else max(1, cap - 1)
        out = TopLaws([], [], [])
        for t in range(n):
            j = P + t
            if _token_id(echoed[j], f"logprobs.tokens[{j}]") != int(tokens[t]):
                raise ProtocolError(f"the echo's token at position {j} is not the id sent ({tokens[t]})")
            if not isinstance(tops[j], dict) or not tops[j]:
                raise ProtocolError(f"logprobs.top_logprobs[{j}] is empty (no log-probs for that prompt position)")
            pairs = [(_token_id(key, f"top_logprobs[{j}] key"), _float(v, f"top_logprobs[{j}]"))
                     for key, v in tops[j].items()]
            ids, lps, _ = _top_k(pairs, cells)
            out.top_ids.append(ids)
            out.top_logprobs.append(lps)
            out.token_logprobs.append(None if own[j] is None else _float(own[j], f"token_logprobs[{j}]"))
            out.short += cells < k
        return out


class SGLangDialect(Dialect):
    name = "sglang"
    probe_paths = ("/get_model_info", "/v1/models")

    def sample_request(self, model, prompt_ids, n, seed, temperature):
        return "/generate", {
            "input_ids": [int(t) for t in prompt_ids],
            "sampling_params": {"max_new_tokens": int(n), "temperature": float(temperature), "top_p": 1.0,
                                "top_k": -1, "min_p": 0.0, "ignore_eos": True, "sampling_seed": _seed(seed)},
            "return_logprob": True, "top_logprobs_num": 0}

    def parse_sample(self, answer, n):
        if isinstance(answer, list):
            answer = answer[0] if answer else {}
        meta = answer.get("meta_info") or {}
        if answer.get("output_ids") is not None:
            tokens = [_int(t, f"output_ids[{i}]") for i, t in enumerate(answer["output_ids"])]
        elif meta.get("output_token_logprobs"):
            tokens = [_int(e[1], f"output_token_logprobs[{i}][1]") for i, e in enumerate(meta["output_token_logprobs"])]
        else:
            raise ProtocolError("the answer holds no output ids (neither output_ids nor meta_info.output_token_logprobs)")
        entries = meta.get("output_token_logprobs")
        reported = None
        if entries is not None and len(entries) == len(tokens):
            reported = [None if e[0] is None else _float(e[0], f"output_token_logprobs[{i}][0]")
                        for i, e in enumerate(entries)]
        return Sample(tokens, reported)

    def tokenize_request(self, model, text):
        return "/tokenize", {"text": text}

    def parse_tokens(self, answer):
        if isinstance(answer, dict) and "input_ids" in answer and "tokens" not in answer:
            answer = {"tokens": answer["input_ids"]}
        return super().parse_tokens(answer)

    def reference_requests(self, model, prompt_ids, tokens, k, texts=None):
        return [("/generate", {
            "input_ids": [int(t) for t in prompt_ids] + [int(t) for t in tokens],
            "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": len(prompt_ids), "top_logprobs_num": int(k)})]

    def parse_reference(self, answers, prompt_ids, tokens, k):
        answer = answers[0][0] if isinstance(answers[0], list) and answers[0] else answers[0]
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        if not isinstance(meta, dict):
            raise ProtocolError("the answer has no meta_info")
        own, tops = meta.get("input_token_logprobs"), meta.get("input_top_logprobs")
        n = len(tokens)
        if not isinstance(own, list) or not isinstance(tops, list) or len(own) < n or len(tops) < n:
            raise ProtocolError(f"meta_info.input_token_logprobs / input_top_logprobs do not cover the {n} "
                                "positions after logprob_start_len")
        out = TopLaws([], [], [])
        for t in range(n):
            if _int(own[t][1], f"input_token_logprobs[{t}][1]") != int(tokens[t]):
                raise ProtocolError(f"input_token_logprobs[{t}] is for token {own[t][1]}, not the id sent ({tokens[t]})")
            if not tops[t]:
                raise ProtocolError(f"input_top_logprobs[{t}] is empty")
            pairs = [(_int(e[1], f"input_top_logprobs[{t}] id"), _float(e[0], f"input_top_logprobs[{t}]"))
                     for e in tops[t]]
            ids, lps, short = _top_k(pairs, k)
            out.top_ids.append(ids)
            out.top_logprobs.append(lps)
            out.token_logprobs.append(None if own[t][0] is None else _float(own[t][0], f"input_token_logprobs[{t}][0]"))
            out.short += short
        return out

    def model_name(self, probe_answer):
        if isinstance(probe_answer, dict) and probe_answer.get("model_path"):
            return str(probe_answer["model_path"])
        return super().model_name(probe_answer)


class LlamaCppDialect(Dialect):
    name = "llama.cpp"
    probe_paths = ("/v1/models", "/health")
    per_position = True

    def sample_request(self, model, prompt_ids, n, seed, temperature):
        return "/completion", {
            "prompt": [int(t) for t in prompt_ids], "n_predict": int(n), "temperature": float(temperature),
            "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "seed": _seed(seed), "n_probs": 1,
            "return_tokens": True, "cache_prompt": True}

    def parse_sample(self, answer, n):
        probs = answer.get("completion_probabilities")
        if answer.get("tokens") is not None:
            tokens = [_int(t, f"tokens[{i}]") for i, t in enumerate(answer["tokens"])]
        elif probs:
            tokens = [_int(e.get("id"), f"completion_probabilities[{i}].id") for i, e in enumerate(probs)]
        else:
            raise ProtocolError("the answer holds no token ids (neither tokens nor completion_probabilities)")
        reported = None
        if probs and len(probs) == len(tokens) and all("logprob" in e for e in probs):
            reported = [_float(e["logprob"], f"completion_probabilities[{i}].logprob") for i, e in enumerate(probs)]
        return Sample(tokens, reported)

    def tokenize_request(self, model, text):
        return "/tokenize", {"content": text, "add_special": True}

    def reference_requests(self, model, prompt_ids, tokens, k, texts=None):
        ids = [int(t) for t in prompt_ids] + [int(t) for t in tokens]
        P = len(prompt_ids)
        return [("/completion", {"prompt": ids[:P + t], "n_predict": 1, "temperature": 0.0, "n_probs": int(k),
                                 "cache_prompt": True, "post_sampling_probs": False})
                for t in range(len(tokens))]

    def parse_reference(self, answers, prompt_ids, tokens, k):
        out = TopLaws([], [], [])
        for t, answer in enumerate(answers):
            probs = answer.get("completion_probabilities")
            if not probs or not isinstance(probs[0], dict) or not probs[0].get("top_logprobs"):
                raise ProtocolError(f"position {t}: completion_probabilities[0].top_logprobs is missing")
            pairs = [(_int(e.get("id"), f"position {t} top id"), _float(e.get("logprob"), f"position {t} top logprob"))
                     for e in probs[0]["top_logprobs"]]
            ids, lps, short = _top_k(pairs, k)
            out.top_ids.append(ids)
            out.top_logprobs.append(lps)
            own = dict(pairs).get(int(tokens[t]))
            out.token_logprobs.append(own)
            out.short += short
        return out


class TGIDialect(Dialect):
    """TGI takes text: a prompt is sent as the text it was tokenized from (``prompt_texts``:
    ids → text, filled when the prompts are tokenized through ``/tokenize``), a continuation as
    its tokens' texts (``details.tokens[].text``); the ids TGI reads back (``prefill``) are
    checked against the ids sampled."""

    name = "tgi"
    probe_paths = ("/info", "/health")
    per_position = True

    def __init__(self):
        self.prompt_texts: dict = {}

    def _prompt_text(self, prompt_ids) -> str:
        text = self.prompt_texts.get(tuple(int(t) for t in prompt_ids))
        if text is None:
            raise ProtocolError("TGI takes text prompts: give the prompts as text (--prompts with \"text\")")
        return text

    def tokenize_request(self, model, text):
        return "/tokenize", {"inputs": text}

    def parse_tokens(self, answer):
        return super().parse_tokens({"tokens": answer} if isinstance(answer, list) else answer)

    def sample_request(self, model, prompt_ids, n, seed, temperature):
        return "/generate", {"inputs": self._prompt_text(prompt_ids), "parameters": {
            "max_new_tokens": int(n), "do_sample": True, "temperature": float(temperature), "top_k": None,
            "top_p": None, "seed": _seed(seed), "details": True}}

    def parse_sample(self, answer, n):
        details = answer.get("details") if isinstance(answer, dict) else None
        if not isinstance(details, dict) or not isinstance(details.get("tokens"), list):
            raise ProtocolError("the answer has no details.tokens (send details: true)")
        entries = details["tokens"]
        tokens = [_int(e.get("id"), f"details.tokens[{i}].id") for i, e in enumerate(entries)]
        reported = [_float(e.get("logprob"), f"details.tokens[{i}].logprob") for i, e in enumerate(entries)]
        return Sample(tokens, reported, [str(e.get("text", "")) for e in entries])

    def reference_requests(self, model, prompt_ids, tokens, k, texts=None):
        if texts is None or len(texts) != len(tokens):
            raise ProtocolError("TGI's reference needs the sampled tokens' texts")
        head = self._prompt_text(prompt_ids)
        return [("/generate", {"inputs": head + "".join(texts[:t]), "parameters": {
            "max_new_tokens": 1, "do_sample": False, "details": True, "decoder_input_details": True,
            "top_n_tokens": int(k)}}) for t in range(len(tokens))]

    def parse_reference(self, answers, prompt_ids, tokens, k):
        out = TopLaws([], [], [])
        for t, answer in enumerate(answers):
            details = answer.get("details") if isinstance(answer, dict) else None
            if not isinstance(details, dict):
                raise ProtocolError(f"position {t}: the answer has no details")
            read = [_int(e.get("id"), f"position {t} prefill id") for e in details.get("prefill") or []]
            expected = [int(x) for x in prompt_ids] + [int(x) for x in tokens[:t]]
            if read[-len(expected):] != expected:
                raise ProtocolError(f"position {t}: TGI tokenized the text back to other ids than the "
                                    "continuation's (use --reference hf:… or endpoint:… for this server)")
            top = (details.get("top_tokens") or [None])[0]
            if not top:
                raise ProtocolError(f"position {t}: details.top_tokens is missing (send top_n_tokens)")
            pairs = [(_int(e.get("id"), f"position {t} top id"), _float(e.get("logprob"), f"position {t} top logprob"))
                     for e in top]
            ids, lps, short = _top_k(pairs, k)
            out.top_ids.append(ids)
            out.top_logprobs.append(lps)
            out.token_logprobs.append(dict(pairs).get(int(tokens[t])))
            out.short += short
        return out

    def model_name(self, probe_answer):
        if isinstance(probe_answer, dict) and probe_answer.get("model_id"):
            return str(probe_answer["model_id"])
        return None


def _choice(answer) -> dict:
    try:
        choice = answer["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ProtocolError("the answer has no choices[0]") from None
    if not isinstance(choice, dict):
        raise ProtocolError("choices[0] is not an object")
    return choice


DIALECTS = {"openai": OpenAIDialect, "sglang": SGLangDialect, "tgi": TGIDialect, "llama.cpp": LlamaCppDialect}


def dialect(name: str) -> Dialect:
    """A dialect by name (``DIALECTS``).

    Raises:
        ValueError: unknown name.
    """
    if name not in DIALECTS:
        raise ValueError(f"server must be one of {sorted(DIALECTS)}, got {name!r}")
    return DIALECTS[name]()
