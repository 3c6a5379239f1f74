"""Argument checks shared by every ``spectr-gbv`` sub-command (numpy and the standard library
only: importable without torch, transformers or cvxpy).

Every bad argument or file becomes ONE line on stderr, ``spectr-gbv SUB: message`` naming the
flag (and the file), exit status 2, no traceback, before any model is loaded:

* ``CliParser``: an ``argparse.ArgumentParser`` whose ``error`` prints that one line (argparse's
  own errors: unknown flag, missing value, invalid choice, a ``type=`` callable refusing).
* ``type=`` callables (``positive_int``, ``nonneg_int``, ``int_at_least``, ``seed_int``, ``positive_float``, ``temperature_value``,
  ``unit_interval_open``, ``top_p_value``, ``existing_file``, ``output_file``, ``output_dir``):
  the per-flag range checks, declared with the flag.
* ``UsageError``: raised by a sub-command's ``check(args)`` (cross-flag checks, file contents,
  size estimates) or by its run at model load; ``cli.main.main`` prints it as one line.
* Size estimates refused up front: the exact engine's enumeration (``exact_outcomes``), the
  oracle programs (``oracle_sizes``), the engine's probability rows (``engine_row_bytes``).
"""

from __future__ import annotations

import argparse
import math
import os
import re

# The exact engine enumerates at most this many draft configurations (over all decode
# states) unless --max-outcomes says otherwise: ~1.5·10^3 per second on one core, so the
# default allows runs of minutes (benchmarks/EXACT_ENGINE.md).
DEFAULT_MAX_OUTCOMES = 10**6
# The oracle programs: at most this many LP variables (and block-law entries V^L).
DEFAULT_MAX_VARIABLES = 2 * 10**6
# Vocabulary sizes of the embedded models (gpu_backend.models.weights.EMBEDDED_MODELS), known before
# loading them; any other model whose folder has no config.json is assumed to have the largest.
EMBEDDED_VOCAB = {
    "qwen2.5-coder-1.5b-instruct": 151_936,
    "qwen2.5-coder-0.5b-instruct": 151_936,
    "smollm2-135m-instruct": 49_152,
}
ASSUMED_VOCAB = max(EMBEDDED_VOCAB.values())
# --dtype: the floating torch dtypes the weights can be loaded in.
DTYPES = ("bfloat16", "float16", "float32", "float64", "half", "float", "double")
SEED_LIMIT = 2**63


class UsageError(ValueError):
    """A bad argument or input file: printed as one line ``spectr-gbv SUB: message``, exit 2."""


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (whitespace runs, newlines included, become one space), cut to
    ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text`` (long library errors), cut to ``limit``."""
    for line in str(text).splitlines():
        if line.strip():
            return one_line(line, limit)
    return ""


def _reword(message: str) -> str:
    """argparse's ``argument --K: must be >= 1, got 0`` → ``--K must be >= 1, got 0``."""
    m = re.match(r"argument ([^:]+): (.*)", message, re.S)
    if not m:
        return message
    names = m.group(1).split("/")
    flag = next((n for n in names if n.startswith("--")), names[0])
    rest = m.group(2)
    if rest.startswith(("must ", "is ", "has ", "does ", "needs ")):
        return f"{flag} {rest}"
    return f"{flag}: {rest}"


class CliParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line, ``PROG: message``, exit status 2 (sub-parsers
    made by ``add_subparsers`` are of the same class, so ``PROG`` is ``spectr-gbv SUB``)."""

    def error(self, message: str):  # noqa: D102 (argparse API)
        self.exit(2, f"{self.prog}: {one_line(_reword(message))}\n")

    def parse_args(self, args=None, namespace=None):  # noqa: D102 (argparse API)
        # as argparse's, but leftover arguments are charged to the sub-command they followed
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = getattr(parsed, "command", None)
            prog = f"{self.prog} {sub}" if sub else self.prog
            self.exit(2, f"{prog}: {one_line('unrecognized arguments: ' + ' '.join(extras))}\n")
        return parsed


# -- type= callables ----------------------------------------------------------------------------

def echo(text: str, limit: int = 20) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters (``'999…'``)."""
    text = str(text)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "…"


# int() refuses more digits than this (sys.get_int_max_str_digits); no flag needs near as many
MAX_INT_DIGITS = 4000


def _int(text: str) -> int:
    digits = text.strip().lstrip("+-").replace("_", "")
    if digits.isdigit() and len(digits) > MAX_INT_DIGITS:
        raise argparse.ArgumentTypeError(f"is too large ({len(digits):,} digits), got {echo(text)}")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {echo(text)}") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {echo(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {echo(text)}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (K, L, counts, threads)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def nonneg_int(text: str) -> int:
    """An integer >= 0 (top-k, where 0 is off)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seed_int(text: str) -> int:
    """A seed: an integer in [0, 2^63)."""
    value = _int(text)
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2^63), got {value}")
    return value


def int_at_least(minimum: int, why: str = ""):
    """A ``type=`` callable: an integer >= ``minimum`` (``why`` is added to the refusal)."""
    def parse(text: str) -> int:
        value = _int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}{why}, got {value}")
        return value

    parse.__name__ = f"int_at_least_{minimum}"
    return parse


# Temperatures below this are refused: the engine divides float32 logits by T, and logits of
# order 10 divided by T < 1e-4 leave float32's range quickly (T = 1e-39 gives inf/NaN rows).
MIN_TEMPERATURE = 1e-4


def temperature_value(text: str) -> float:
    """A sampling temperature: a finite number >= ``MIN_TEMPERATURE``."""
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    if value < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"must be >= {MIN_TEMPERATURE:g} (logits / T must stay finite in float32), got {echo(text)}")
    return value


def check_utf8_text(flag: str, text: str) -> None:
    """Refuse text that does not encode as UTF-8 (e.g. lone surrogates from invalid bytes in argv).

    Raises:
        UsageError: ``FLAG must be valid UTF-8 text`` with the position.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UsageError(f"{flag} must be valid UTF-8 text (character {err.start} is "
                         f"{text[err.start]!r}, not encodable)") from None


def json_safe(obj):
    """``obj`` with every non-finite float (NaN, ±inf) replaced by None, for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def positive_float(text: str) -> float:
    """A finite number > 0 (temperature, time limits)."""
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def unit_interval_open(text: str) -> float:
    """A number in (0, 1) (a false-alarm rate)."""
    value = _float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {text}")
    return value


def probability_value(text: str) -> float:
    """A probability in [0, 1] (a confidence threshold)."""
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def top_p_value(text: str) -> float:
    """A nucleus mass in (0, 1]."""
    value = _float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _file_path(text: str) -> str:
    """``text`` with ~ expanded, refused when empty or a folder (ArgumentTypeError)."""
    if not text:
        raise argparse.ArgumentTypeError("must name a file, got ''")
    path = os.path.expanduser(text)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    return path


def existing_file(text: str) -> str:
    """A path to an existing readable file."""
    path = _file_path(text)
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text} (permission denied)")
    return text


def output_file(text: str) -> str:
    """A file to write at the end of a run: its folder must exist and be writable, and the path
    must not be a folder (checked now, not after a long run)."""
    path = _file_path(text)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {text} (permission denied)")
    return text


def json_destination(text: str) -> str:
    """``--json``'s value: "-" (stdout) or a file to write (``output_file``)."""
    return text if text == "-" else output_file(text)


def add_json_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """The same ``--json [FILE]`` on every sub-command: FILE gets ``what`` as JSON; ``-`` or no
    FILE prints the JSON on stdout, and the text report then goes to stderr."""
    parser.add_argument("--json", dest="json_file", nargs="?", const="-", default=None,
                        type=json_destination, metavar="FILE",
                        help=f"write {what} as JSON to FILE; '-' or no FILE: to stdout (the text "
                        "report then goes to stderr)")


def write_json(dest: str | None, obj, indent: int | None = 1, allow_nan: bool = True) -> None:
    """Write ``obj`` as JSON to ``dest`` ("-": stdout; None: nowhere).  ``allow_nan=False``:
    a NaN or infinity raises ValueError instead of being written as invalid JSON (map them with
    ``json_safe`` first)."""
    import json
    import sys

    if dest is None:
        return
    if dest == "-":
        json.dump(obj, sys.stdout, indent=indent, allow_nan=allow_nan)
        sys.stdout.write("\n")
        return
    with open(dest, "w") as fh:
        json.dump(obj, fh, indent=indent, allow_nan=allow_nan)


def text_stream(args: argparse.Namespace):
    """Where a sub-command prints its text report: stderr when its JSON goes to stdout."""
    import sys

    return sys.stderr if getattr(args, "json_file", None) == "-" else sys.stdout


def output_dir(text: str) -> str:
    """A folder to write into (created if missing): not an existing file, and its nearest
    existing ancestor is a writable folder."""
    if not text:
        raise argparse.ArgumentTypeError("must name a folder, got ''")
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.exists(path) and not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise argparse.ArgumentTypeError(f"cannot create {text}: {probe} is a file")
    if not os.access(probe, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {text} (permission denied at {probe})")
    return text


def dtype_name(text: str) -> str:
    """A floating torch dtype name (``DTYPES``)."""
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(DTYPES)}, got {text!r}")
    return text


def dtype_or_auto(text: str) -> str:
    """``auto`` (bfloat16 where the machine computes it no slower than float32, measured:
    ``gpu_backend.tuning.machine.auto_dtype``) or a floating torch dtype name (``DTYPES``)."""
    if text == "auto":
        return text
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"must be auto or one of {', '.join(DTYPES)}, got {text!r}")
    return text


def claim_ids(text: str, valid: list[str]) -> list[str]:
    """Comma-separated ids, each in ``valid``, order kept, duplicates dropped.

    Raises:
        UsageError: no id, or unknown ids (the message lists the valid ones).
    """
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not ids:
        raise UsageError(f"--claims: give at least one claim id; valid ids: {', '.join(valid)}")
    unknown = [i for i in ids if i not in valid]
    if unknown:
        raise UsageError(f"--claims: unknown claim id(s) {', '.join(unknown)}; valid ids: {', '.join(valid)}")
    return list(dict.fromkeys(ids))


# -- sizes ----------------------------------------------------------------------------------------

def available_memory_bytes() -> int | None:
    """Memory available to a new allocation now (psutil, /proc/meminfo or sysconf), or None."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unusable: fall back
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000.0
    return f"{n:.3g} PB"


def format_log10(lg: float) -> str:
    """A count given as its log10, readable: ``123,456`` when small, ``~1.2e+15`` or
    ``~10^3010.3`` when large."""
    if lg < 15:
        return f"{round(10 ** lg):,}"
    if lg < 300:
        return f"~{10 ** lg:.2g}"
    return f"~10^{lg:.1f}"


def _log10_sum(*logs: float) -> float:
    top = max(logs)
    return top + math.log10(sum(10 ** (x - top) for x in logs))


def _log10_comb_multisets(log10_n: float, K: int) -> float:
    """log10 C(n + K − 1, K): the K-multisets of n items (n given as its log10)."""
    ln10 = math.log(10)
    if log10_n <= 12:
        n = round(10 ** log10_n)
        return (math.lgamma(n + K) - math.lgamma(K + 1) - math.lgamma(n)) / ln10
    # n astronomically large: C(n + K − 1, K) ≈ n^K / K!
    return K * log10_n - math.lgamma(K + 1) / ln10


def max_row_support(model) -> int:
    """The largest number of tokens with positive probability in any row of a TableModel (V for
    other models): the branching of a draft or target block."""
    table = getattr(model, "table", None)
    if not table:
        return int(model.vocab_size)
    return max(int((row > 0).sum()) for row in table.values())


def exact_outcomes(draft, target, K: int, L: int, n_tokens: int) -> tuple[float, str]:
    """Upper estimate of what ``spectr-gbv exact`` enumerates, as (log10 count, explanation).

    Per decode state the engine enumerates every configuration of K draft blocks: at most
    b^(K·L) with b the largest draft-row support (≤ V); the decode states are at most the
    emitted prefixes of length < N, Σ_{n<N} V^n; the target law has at most V^N sequences.
    Each configuration carries its decode state's prefix (up to N tokens), whose rows the table
    models look up suffix by suffix, so the generation DP's work is counted as configurations ×
    states × N (with V = 1 there is one state per length, but N = 10^4 tokens takes hours).
    Each configuration also enumerates the rule's coins, so the real work is larger still.
    """
    V = int(target.vocab_size)
    b = max_row_support(draft)
    per_state = K * L * math.log10(b) if b > 1 else 0.0
    states = n_tokens * math.log10(V) - math.log10(V - 1) if V > 1 else math.log10(n_tokens)
    target_seqs = n_tokens * math.log10(max_row_support(target)) if max_row_support(target) > 1 else 0.0
    total = _log10_sum(per_state + states + math.log10(n_tokens), target_seqs)
    how = (f"up to {format_log10(per_state)} draft configurations (b^(K·L), b = {b}) in each of up to "
           f"{format_log10(states)} decode states, each carrying a prefix of up to N = {n_tokens:,} tokens, "
           f"and {format_log10(target_seqs)} target sequences")
    return total, how


def oracle_sizes(draft, target, K: int, L: int) -> dict[str, float]:
    """log10 of the oracle programs' sizes (upper estimates from the row supports):
    ``block`` (V^L entries of each block law), ``cic`` (n·m variables), ``global_ot``
    (C(n+K−1, K)·m), ``no_modification`` (≤ C(n+K−1, K)·m·(L+1)), ``tuples_bytes`` (the
    K-multisets as int64), with n ≤ b_p^L draft and m ≤ b_q^L target blocks of positive mass."""
    V = int(target.vocab_size)
    lb = L * math.log10(V)
    ln = L * math.log10(max_row_support(draft))
    lm = L * math.log10(max_row_support(target))
    lM = _log10_comb_multisets(ln, K)
    return {
        "block": lb,
        "draft_blocks": ln,
        "target_blocks": lm,
        "multisets": lM,
        "cic": ln + lm,
        "global_ot": lM + lm,
        "no_modification": lM + lm + math.log10(L + 1),
        "tuples_bytes": lM + math.log10(8 * K),
    }


def engine_row_bytes(K: int, L: int, V: int) -> int:
    """Bytes of one iteration's float32 probability rows in the engine: K·L draft rows and
    K·(L+1) target rows of V entries."""
    return 4 * V * K * (2 * L + 1)


def check_engine_memory(K: int, L: int, V: int, known_vocab: bool, flags: str) -> None:
    """Refuse K and L whose probability rows alone cannot fit in the available memory.

    Raises:
        UsageError: naming ``flags`` and stating the estimate.
    """
    need = engine_row_bytes(K, L, V)
    avail = available_memory_bytes()
    if avail is not None and need > avail:
        v = f"V = {V:,}" + ("" if known_vocab else ", assumed")
        raise UsageError(f"{flags}: one iteration's K·(L+1) target and K·L draft probability rows "
                         f"need {human_bytes(need)} (K = {K:,}, L = {L:,}, {v}, float32), more than "
                         f"the {human_bytes(avail)} of memory available")


# -- models of the torch engine -------------------------------------------------------------------

def _hub_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face endpoint accepts a TCP connection within ``timeout`` seconds."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _hub_cached_config(repo_id: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # invalid id, or huggingface_hub missing
        return None
    return path if isinstance(path, str) else None


def _config_vocab(path: str) -> int | None:
    import json

    try:
        with open(path) as fh:
            value = json.load(fh).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def check_model_spec(flag: str, spec: str, embedded: dict[str, str]) -> tuple[int, bool]:
    """Check a ``--target`` / ``--draft`` value without loading it.

    Args:
        flag: the flag's name for the message.
        spec: an embedded name or alias, a local folder, a local ``.gguf`` file or a hub id.
        embedded: alias or canonical name → canonical name of the embedded models.
    Returns:
        (V, known): the vocabulary size (from the embedded table or the folder's config.json;
        ``ASSUMED_VOCAB`` with known = False otherwise).
    Raises:
        UsageError: empty, a local path that does not exist, not a valid hub id, or a hub id
            that is not cached while the hub is offline or unreachable.
    """
    names = ", ".join(sorted(embedded))
    if not spec or not spec.strip():
        raise UsageError(f"{flag} must name a model (embedded: {names}; or a folder, .gguf file or hub id)")
    canonical = embedded.get(spec)
    if canonical is not None:
        return EMBEDDED_VOCAB.get(canonical, ASSUMED_VOCAB), canonical in EMBEDDED_VOCAB
    path = os.path.expanduser(spec)
    if os.path.isdir(path):
        cfg = os.path.join(path, "config.json")
        if not os.path.isfile(cfg):
            raise UsageError(f"{flag} {spec}: folder has no config.json (not a model saved with save_pretrained)")
        vocab = _config_vocab(cfg)
        return (vocab, True) if vocab else (ASSUMED_VOCAB, False)
    if spec.endswith(".gguf"):
        if os.path.isfile(path):
            return ASSUMED_VOCAB, False
        raise UsageError(f"{flag} {spec}: no such .gguf file")
    if os.path.exists(path):
        raise UsageError(f"{flag} {spec}: a file that is not a .gguf model (give a model folder, a .gguf "
                         f"file, a hub id or an embedded model: {names})")
    if spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").replace("/", "", 1):
        raise UsageError(f"{flag} {spec}: no such model folder or .gguf file (embedded models: {names})")
    if not HUB_ID.match(spec):
        raise UsageError(f"{flag} {spec!r}: not an embedded model ({names}), a local folder or .gguf "
                         "file, nor a Hugging Face hub id")
    cached = _hub_cached_config(spec)
    if cached:
        vocab = _config_vocab(cached)
        return (vocab, True) if vocab else (ASSUMED_VOCAB, False)
    why = ("the hub is offline (HF_HUB_OFFLINE)" if _hub_offline()
           else "huggingface.co cannot be reached (no network)" if not hub_reachable() else None)
    if why:
        raise UsageError(f"{flag} {spec}: not an embedded model ({names}) nor a local folder or .gguf "
                         f"file, not in the Hugging Face cache, and {why}")
    return ASSUMED_VOCAB, False
