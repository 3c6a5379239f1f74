"""The one check of a sampling temperature (standard library only: the CLI's argument checks
import it without torch).

Every entry point that takes a temperature goes through ``check_temperature`` and so refuses
the same values with the same message: ``sampling.SamplingConfig`` (the Python API, the
engine, the benchmarks), the command line (``cli.args.temperature_value``) and the vLLM-layout
adapters' per-request temperatures (``adapters.vllm_layout.check_layout``).

Accepted: T = 0 (``GREEDY_TEMPERATURE``: greedy decoding, the argmax with ties to the lowest
token id, ``sampling.probabilities``) and finite T ≥ ``MIN_TEMPERATURE`` = 1e-4.

Why the floor is 1e-4 (float32 rows: ``sampling.probabilities`` divides float32 logits by T,
then takes a float32 softmax, which subtracts the row's largest value before ``exp``):

* Overflow, below the floor.  l / T overflows to ±inf once |l| > T · FLT_MAX, FLT_MAX =
  3.4028e38, and a row holding +inf becomes NaN (inf − inf in the softmax).  At T = 1e-38 every
  logit above 3.4 overflows, i.e. every row of a real language model (logits of order 10–100),
  and the engine then stopped with a ``NonFiniteError`` that blamed the model.  At T = 1e-4
  only |l| > 3.4e34 overflows, thirty orders of magnitude above real logits.
* Underflow, nothing to gain below the floor.  float32 ``exp(x)`` rounds to 0 for x < ln 2^-150
  = −103.97, so at temperature T every token whose logit is more than 103.97 · T below the
  row's largest has probability exactly 0.  At T = 1e-4 that gap is 0.0104, less than one
  bfloat16 rounding step of a logit in [2, 4) (2^-6 = 0.0156): rows are already one-hot except
  for logits within about one rounding step of the top, and a smaller T changes only those
  near-ties while moving towards the overflow.  The T → 0 limit itself is asked for exactly,
  deterministically, with T = 0 (greedy).
"""

from __future__ import annotations

import math
import numbers

# T = 0: greedy decoding (the argmax, ties to the lowest token id), as serving engines do.
GREEDY_TEMPERATURE = 0.0
# The smallest positive temperature accepted (module doc: float32 logits / T overflow below it,
# and above it float32 rows are already the greedy limit up to near-ties).
MIN_TEMPERATURE = 1e-4


def temperature_problem(value, greedy_ok: bool = True) -> str | None:
    """Why ``value`` is not a temperature, as the end of a message that starts with the
    argument's name ("must be ..., got ..."), or None when it is one.

    A temperature is 0 (greedy; only where ``greedy_ok``) or a finite real number >=
    ``MIN_TEMPERATURE``.  The floor's message is the same at every entry point:
    "must be >= 0.0001 (float32 logits / T overflow below it)", followed by "; 0 is greedy
    decoding" where greedy is accepted.
    """
    number = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if not number or not math.isfinite(value) or value < 0:
        least = ">= 0 (0: greedy decoding)" if greedy_ok else "> 0"
        return f"must be a finite number {least}, got {value!r}"
    if value == GREEDY_TEMPERATURE:
        return None if greedy_ok else f"must be > 0 (greedy decoding, temperature 0, is not offered here), got {value!r}"
    if value < MIN_TEMPERATURE:
        greedy = "; 0 is greedy decoding" if greedy_ok else ""
        return f"must be >= {MIN_TEMPERATURE:g} (float32 logits / T overflow below it{greedy}), got {value!r}"
    return None


def check_temperature(value, name: str = "temperature", greedy_ok: bool = True) -> float:
    """``value`` as a float temperature: 0.0 (greedy, where ``greedy_ok``) or a finite
    T >= ``MIN_TEMPERATURE``.

    Args:
        value: a real number (int, float, numpy scalar; not bool).
        name: the argument named in the message ("temperature", "--temperature",
            "temperatures[3]").
        greedy_ok: accept 0 (greedy decoding).
    Returns:
        float(value).
    Raises:
        ValueError: "<name> " + ``temperature_problem(value)``: not a finite real number,
            negative, 0 where greedy is not accepted, or 0 < T < 1e-4 ("<name> must be >=
            0.0001 (float32 logits / T overflow below it; 0 is greedy decoding), got 1e-05").
    """
    problem = temperature_problem(value, greedy_ok)
    if problem is not None:
        raise ValueError(f"{name} {problem}")
    return float(value)
