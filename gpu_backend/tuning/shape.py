"""How K and L of a generation are chosen: fixed, the defaults, or measured.

``plan_shape`` (no torch; before any model is loaded) says which shapes are candidates: a given
K or L is the only one; a single-draft rule has K = 1; without the automatic configuration the
rest are the defaults (``defaults.DEFAULT_K``, ``DEFAULT_L``); with it the candidates
``defaults.K_CANDIDATES`` × ``L_CANDIDATES``.  ``choose_shape`` (after loading) runs the
automatic configuration when the plan asks for it (``autoconfig.configure``: measured costs,
cached; ``speed_model.choose``) and returns the rule and shape to run: the best (K, L), or
plain sampling ("ar") when speculation is predicted not to pay and no rule was given.
Choosing K and L from information gathered before the generation keeps every rule lossless.
"""

from __future__ import annotations

from dataclasses import dataclass

from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L, K_CANDIDATES, L_CANDIDATES

# the automatic configuration solves K-SEQ for every k <= K and times target forwards over up to
# 1 + K*L tokens: a fixed K or L beyond these needs the other fixed too
AUTO_K_LIMIT = 2 * K_CANDIDATES[-1]
AUTO_L_LIMIT = 4 * L_CANDIDATES[-1]


@dataclass(frozen=True)
class ShapePlan:
    """The candidate shapes of one generation.

    Attributes:
        auto: whether the shape is chosen by measured costs (``choose_shape``).
        K_candidates, L_candidates: the shapes that may be chosen; without ``auto`` each holds
            exactly the shape to run.
    """

    auto: bool
    K_candidates: tuple[int, ...]
    L_candidates: tuple[int, ...]

    @property
    def K(self) -> int:
        """The K run without the automatic configuration."""
        return self.K_candidates[0]

    @property
    def L(self) -> int:
        """The L run without the automatic configuration."""
        return self.L_candidates[0]


def plan_shape(rule: str, K: int | None = None, L: int | None = None, auto: bool = True,
               names: tuple[str, str, str] = ("K", "L", "auto=False")) -> ShapePlan:
    """The candidates for ``rule`` ("ar": plain sampling, nothing to choose).

    Args:
        K, L: fixed values, or None to choose (or take the default).
        auto: measure costs to choose what is not fixed (needs K or L free, a speculative rule).
        names: how the refusal names K, L and turning the measurement off (the command line
            passes ``("--K", "--L", "--no-auto")``).
    Raises:
        ValueError: with the measurement on, a fixed K or L beyond what it measures
            (``AUTO_K_LIMIT``, ``AUTO_L_LIMIT``).
    """
    from spectr_gbv.reference.rules import registry

    k_name, l_name, off = names
    auto = rule != "ar" and auto and (K is None or L is None)
    if auto:
        for name, value, most in ((k_name, K, AUTO_K_LIMIT), (l_name, L, AUTO_L_LIMIT)):
            if value is not None and value > most:
                raise ValueError(f"{name} {value}: above {most} the automatic configuration is not measured; "
                                 f"give both {k_name} and {l_name}, or {off}")
    single = rule != "ar" and registry.is_single_draft(rule)
    if K is not None or single:
        Ks = (K or 1,)
    else:
        Ks = K_CANDIDATES if auto else (DEFAULT_K,)
    Ls = (L,) if L is not None else (L_CANDIDATES if auto else (DEFAULT_L,))
    return ShapePlan(auto, tuple(Ks), tuple(Ls))


@dataclass(frozen=True)
class ShapeChoice:
    """What a generation runs.

    Attributes:
        rule: the rule ("ar" when the measurement chose plain sampling).
        K, L: the shape (unused for "ar").
        predicted: the predicted decode tokens per second, or None without a measurement.
        config: the ``autoconfig.AutoConfig`` the choice came from, or None.
        speculating_anyway: the measurement preferred plain sampling but a rule was given.
        fell_back: the measurement chose plain sampling (no rule was given).
    """

    rule: str
    K: int
    L: int
    predicted: float | None = None
    config: object = None
    speculating_anyway: bool = False
    fell_back: bool = False


def choose_shape(plan: ShapePlan, rule: str, rule_given: bool, target=None, draft=None, tokenizer=None,
                 spec=None, sampling=None, prompt_ids=(1, 2), refresh: bool = False,
                 eos_token_ids=(), verifier=None, new_tokens: int | None = None,
                 backend=None) -> ShapeChoice:
    """The rule and shape to run: the plan's own without ``plan.auto``; else the measured best
    (``autoconfig.configure`` on the loaded ``target``/``draft``, ``spec`` its cache key), or
    plain sampling when it is predicted to pay more and ``rule_given`` is False.  ``verifier``:
    the rule's verifier, timed by the measurement (``autoconfig.configure``).  ``new_tokens``:
    the generation's ``max_new_tokens``; with it the choice counts the draft's prefill of
    ``prompt_ids`` (``speed_model.choose``), without it it is on decode speed alone.  ``backend``:
    the models' ``decoding.backend.Backend`` (None: torch)."""
    if not plan.auto:
        return ShapeChoice(rule, plan.K, plan.L)
    from spectr_gbv.gpu_backend.tuning.autoconfig import configure

    auto = configure(target, draft, tokenizer, spec, rule, sampling, plan.K_candidates, plan.L_candidates,
                     fallback_prompt=prompt_ids, refresh=refresh, eos_token_ids=eos_token_ids,
                     verifier=verifier, prompt_tokens=len(prompt_ids) if new_tokens is not None else None,
                     new_tokens=new_tokens, **({"backend": backend} if backend is not None else {}))
    choice = auto.choice
    if choice.speculate or rule_given:
        return ShapeChoice(rule, choice.best.K, choice.best.L, choice.best.tokens_per_second, auto,
                           speculating_anyway=not choice.speculate)
    return ShapeChoice("ar", plan.K, plan.L, choice.ar_tokens_per_second, auto, fell_back=True)
