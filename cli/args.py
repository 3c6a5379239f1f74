"""Argument checks shared by every ``spectr-gbv`` sub-command (numpy and the standard library
only: importable without torch, transformers or cvxpy).

Every bad argument or file becomes ONE line on stderr, ``spectr-gbv SUB: message`` naming the
flag (and the file), exit status 2, no traceback, before any model is loaded:

* ``CliParser``: an ``argparse.ArgumentParser`` whose ``error`` prints that one line (argparse's
  own errors: unknown flag, missing value, invalid choice, a ``type=`` callable refusing).
* ``type=`` callables (``positive_int``, ``nonneg_int``, ``int_at_least``, ``seed_int``, ``run_seed_int``, ``positive_float``, ``temperature_value``,
  ``positive_temperature_value``,
  ``unit_interval_open``, ``top_p_value``, ``existing_file``, ``output_file``, ``output_dir``):
  the per-flag range checks, declared with the flag.
* ``UsageError``: raised by a sub-command's ``check(args)`` (cross-flag checks, file contents,
  size estimates) or by its run at model load; ``cli.main.main`` prints it as one line.

What the checks compute lives with the library: the exact enumeration's size
(``reference.sizes``), the oracle programs' (``oracle.sizes``), the engine's rows
(``gpu_backend.engine.memory``), the models named by ``--target`` / ``--draft``
(``gpu_backend.models.catalog``), the rules' policies (``reference.rules.policy``).
"""

from __future__ import annotations

import argparse
import math
import os
import re

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


def run_seed_int(text: str) -> int:
    """The seed of one generation (``generate --seed``): an integer in [0, 2^64), the range of
    the fresh seeds a run without one draws (``reference.seeds.fresh_seed``), so that any
    printed seed replays."""
    value = _int(text)
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2^64), got {value}")
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


# The floor of positive temperatures, derived in gpu_backend/decoding/temperature.py (torch-free):
# float32 logits / T overflow below it.  Every entry point checks with that module.
from spectr_gbv.gpu_backend.decoding.temperature import temperature_problem  # noqa: E402


def temperature_value(text: str) -> float:
    """A sampling temperature: 0 (greedy decoding: the argmax, ties to the lowest token id) or a
    finite number >= ``MIN_TEMPERATURE`` (``gpu_backend.decoding.temperature.check_temperature``'s
    rule and message)."""
    value = _float(text)
    problem = temperature_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def positive_temperature_value(text: str) -> float:
    """A sampling temperature where greedy decoding is not offered (sweeps, certificates): a
    finite number >= ``MIN_TEMPERATURE``, with the same floor message as ``temperature_value``."""
    value = _float(text)
    problem = temperature_problem(value, greedy_ok=False)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


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


class usage_errors:
    """``with usage_errors(prefix):`` a library ``ValueError`` raised inside becomes a
    ``UsageError`` (``prefix`` + its message), printed as one line by ``cli.main``."""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if isinstance(err, UsageError) and not self.prefix:
            return False
        if isinstance(err, ValueError):
            raise UsageError(self.prefix + str(err)) from None
        return False
