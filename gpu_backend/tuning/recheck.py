"""Checking the auto-configuration against what a generation measured.

The costs behind a choice are timed once and cached (``autoconfig.configure``); a timing taken
while another process held a core stays wrong for every later run.  So every generation that
ran on a measured choice compares its decode rate (tokens after the first emission over the
time after it, ``GenerationResult.decode_tokens_per_second``) with the rate the choice
predicted (``ShapeChoice.predicted``).  Backend-agnostic: ``compare`` needs only the two rates
and, optionally, the generation's tokens per iteration with the predicted seconds per iteration.

When they differ by more than ``RATE_TOLERANCE`` (relative, in either direction):
- if the predicted seconds per iteration, with the tokens per iteration this generation really
  had, explain the measured rate within the tolerance, the costs were right and the prompt
  accepted more or less than the calibration text: the cache is kept (timing again would
  give the same costs) and one line says so;
- otherwise the cached costs are marked stale (``cache.mark_stale``) and one line says that
  the next run times them again.  Not timed again at once: a timing takes seconds to minutes
  on a real pair, after the user already has the text; the next ``configure`` does it (and
  says so in one line).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from spectr_gbv.gpu_backend.tuning.timing import RATE_TOLERANCE


@dataclass(frozen=True)
class RateCheck:
    """One generation's decode rate against the prediction.

    Attributes:
        predicted, measured: decode tokens per second (predicted by the choice, measured).
        cost_predicted: the costs' prediction with this generation's own tokens per iteration
            (tokens per iteration / predicted seconds per iteration), or None when unknown.
        stale: the costs are judged wrong (marked stale when a cache key is known).
        line: the one line for the user, or None when the rates agree within the tolerance.
    """

    predicted: float
    measured: float
    cost_predicted: float | None
    stale: bool
    line: str | None

    @property
    def deviation(self) -> float:
        """measured / predicted − 1 (> 0: faster than predicted)."""
        return self.measured / self.predicted - 1.0


def _off(measured: float, predicted: float, tolerance: float) -> bool:
    return abs(measured / predicted - 1.0) > tolerance


def compare(predicted: float, measured: float, *, tokens_per_iteration: float | None = None,
            iteration_s: float | None = None, tolerance: float = RATE_TOLERANCE) -> RateCheck:
    """Judge a measured decode rate against its prediction (see the module docstring).

    Args:
        predicted, measured: tokens per second, finite and > 0.
        tokens_per_iteration: tokens emitted per target call in this generation's decode (after
            the first emission); iteration_s: the costs' predicted seconds per target call.
            Both or neither.
        tolerance: relative difference allowed (default ``RATE_TOLERANCE`` = 0.25).
    Returns:
        RateCheck (its ``line`` None when |measured / predicted − 1| ≤ tolerance).
    Raises:
        ValueError: a rate that is not finite and > 0, or a negative tolerance.
    """
    for name, x in (("predicted", predicted), ("measured", measured)):
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"{name} decode rate must be finite and > 0, got {x}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    cost_predicted = None
    if tokens_per_iteration is not None and iteration_s is not None and iteration_s > 0:
        cost_predicted = tokens_per_iteration / iteration_s
    if not _off(measured, predicted, tolerance):
        return RateCheck(predicted, measured, cost_predicted, False, None)
    head = (f"auto-configuration: decode {measured:.2f} tokens/s against {predicted:.2f} predicted "
            f"({100 * (measured / predicted - 1):+.1f} %, more than {100 * tolerance:.0f} %)")
    if cost_predicted is not None and not _off(measured, cost_predicted, tolerance):
        return RateCheck(predicted, measured, cost_predicted, False,
                         head + f": the timed costs hold ({cost_predicted:.2f} tokens/s at this prompt's "
                         f"{tokens_per_iteration:.2f} tokens per target call), the prompt's acceptance "
                         f"differs from the calibration text's; the cache is kept")
    return RateCheck(predicted, measured, cost_predicted, True,
                     head + ": the cached costs are marked stale and will be timed again on the next run")


def decode_tokens_per_iteration(result) -> float | None:
    """Tokens per target call after the first emission of a speculative ``GenerationResult``
    ((new_tokens − first_emission_tokens) / (iterations − 1)); None for plain sampling or a
    generation of one iteration."""
    iterations = len(getattr(result, "taus", ()) or ())
    if iterations < 2:
        return None
    return (result.new_tokens - result.first_emission_tokens) / (iterations - 1)


def recheck(choice, result, log=None) -> RateCheck | None:
    """After a generation on ``choice`` (``shape.ShapeChoice``): compare, and mark the cached
    costs stale when they are judged wrong; the line (if any) goes to ``log``.

    Args:
        choice: the ShapeChoice run (nothing is checked without a measured ``config``).
        result: its ``GenerationResult`` (``decode_tokens_per_second``, ``taus``, ...).
        log: callable receiving the one line (default: stderr).
    Returns:
        RateCheck, or None when there is nothing to compare (no measurement behind the choice,
        or a generation too short for a decode rate).
    """
    from spectr_gbv.gpu_backend.tuning.speed_model import ar_seconds_per_token, iteration_seconds

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    config = getattr(choice, "config", None)
    predicted = getattr(choice, "predicted", None)
    measured = result.decode_tokens_per_second
    if config is None or predicted is None or not (math.isfinite(measured) and measured > 0):
        return None
    if choice.rule == "ar":
        per_iteration, iteration_s = 1.0, ar_seconds_per_token(config.costs)
    else:
        per_iteration = decode_tokens_per_iteration(result)
        try:
            iteration_s = iteration_seconds(config.costs, choice.K, choice.L)
        except ValueError:
            iteration_s = None
    check = compare(predicted, measured, tokens_per_iteration=per_iteration, iteration_s=iteration_s)
    if check.stale and getattr(config, "costs_key", None) is not None:
        from spectr_gbv.gpu_backend.tuning.cache import mark_stale

        mark_stale(config.costs_key, f"a generation decoded {measured:.2f} tokens/s against "
                   f"{predicted:.2f} predicted", log)
    if check.line is not None:
        log(check.line)
    return check
