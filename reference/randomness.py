"""Sources of randomness for the rules: a seeded sampler and an exact enumerator.

Every rule asks its source for ``coin(h, key)`` (a Bernoulli with success probability h;
``key = (k, i)`` addresses the coin: draft k, sub-block length i) and ``draw(weights)`` (a
categorical proportional to non-negative weights; each iteration draws once, the correction or
the bonus, after drafting).  The same rule code
then either samples (``SamplingSource``) or has its exact law computed (``enumerate_law``),
so the law the tests check is the law of the code that samples (docs/design.md §2.3).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Hashable, Protocol

import numpy as np


class Source(Protocol):
    """What a rule may ask of its randomness."""

    def coin(self, h: float, key: tuple[int, int] = (0, 0)) -> bool:
        """True with probability ``clip(h, 0, 1)``; ``key`` = (draft k, sub-block length i)."""

    def draw(self, weights: np.ndarray) -> int:
        """Index i with probability weights[i] / Σ weights (weights ≥ 0, Σ > 0)."""


def _check_weights(weights: np.ndarray) -> tuple[np.ndarray, float]:
    """The weights as float64 and their sum; ValueError on NaN/inf, negatives or zero mass."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"weights must be a non-empty 1-D array, got shape {w.shape}")
    total = float(w.sum())
    if total != total or total == float("inf"):  # a NaN or inf anywhere shows in the sum
        raise ValueError("weights contain NaN or infinite values")
    if w.min() < 0:
        raise ValueError(f"weights contain negative values (min {w.min():.3g})")
    if not total > 0:
        raise ValueError("weights sum to 0: nothing to draw")
    return w, total


def _check_h(h: float) -> float:
    h = float(h)
    if h != h:
        raise ValueError("coin probability h is NaN")
    return min(1.0, max(0.0, h))


class SamplingSource:
    """Seeded sampler.

    Args:
        seed: an int seed or a numpy ``Generator``.
    """

    def __init__(self, seed: int | np.random.Generator = 0):
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def coin(self, h: float, key: tuple[int, int] = (0, 0)) -> bool:
        # U in [0, 1) and a strict comparison: P(U < h) = h exactly, h = 0 never fires.
        return bool(self.rng.random() < _check_h(h))

    def draw(self, weights: np.ndarray) -> int:
        w, _ = _check_weights(weights)
        cum = np.cumsum(w)
        # side="right" lands on the first index whose cumulative weight exceeds u·total, so a
        # zero-weight index is never returned.
        return int(np.searchsorted(cum, self.rng.random() * cum[-1], side="right"))


class MatchedSource:
    """Replays given noise, for matched-noise comparisons between backends.

    Coin (k, i) succeeds iff ``uniforms[k, i] <= h`` (uniforms in (0, 1], so h = 0 never
    fires and h = 1 always does); a draw is the exponential race
    ``argmax_x log(w_x) − log(exponentials[x])`` over the positive weights, i.e. the token with
    the largest w_x / E_x.  The same conventions as gpu_backend's verifiers.

    Args:
        uniforms: float64 [K, L+1], one per coin address.
        exponentials: float64 [V], Exp(1) draws for the single correction or bonus draw.
    """

    def __init__(self, uniforms: np.ndarray, exponentials: np.ndarray):
        self.uniforms = np.asarray(uniforms, dtype=np.float64)
        self.exponentials = np.asarray(exponentials, dtype=np.float64)

    def coin(self, h: float, key: tuple[int, int] = (0, 0)) -> bool:
        return bool(self.uniforms[key] <= _check_h(h))

    def draw(self, weights: np.ndarray) -> int:
        w, _ = _check_weights(weights)
        with np.errstate(divide="ignore"):
            score = np.where(w > 0, np.log(w) - np.log(self.exponentials), -np.inf)
        return int(np.argmax(score))


class CoinsOnly:
    """A source that forwards coins to ``inner`` and answers the (single, last) draw with the
    first index of positive weight, without branching: the law of τ, which is decided before the
    draw, enumerated without expanding the draw (``enumerate_law(lambda src:
    rule.decide(block, CoinsOnly(src)).tau)``).

    Raises (from ``coin``/``draw``):
        RuntimeError: a coin after the draw, or a second draw.
        ValueError: draw weights that are not a non-negative finite vector of positive mass.
    """

    def __init__(self, inner):
        self.inner = inner
        self.drawn = False

    def coin(self, h, key=(0, 0)):
        if self.drawn:
            raise RuntimeError("tau_law: the rule tossed a coin after its draw")
        return self.inner.coin(h, key)

    def draw(self, weights):
        if self.drawn:
            raise RuntimeError("tau_law: the rule drew twice")
        self.drawn = True
        w = np.asarray(weights, dtype=np.float64)
        if not (w.ndim == 1 and np.all(np.isfinite(w)) and w.min() >= 0 and w.sum() > 0):
            raise ValueError("tau_law: draw weights are not a non-negative finite vector of "
                             "positive mass")
        return int(np.flatnonzero(w > 0)[0])


class _ReplaySource:
    """Follows a prescribed list of choice indices, then takes option 0 at every new branch
    point and records how many options it had (depth-first enumeration by replay)."""

    __slots__ = ("path", "pos", "prob", "new_branches")

    def __init__(self, path: tuple[int, ...]):
        self.path = path
        self.pos = 0
        self.prob = 1.0
        self.new_branches: list[int] = []

    def _choose(self, probs: list[float]) -> int:
        if len(probs) == 1:  # no branching: keep it out of the path
            self.prob *= probs[0]
            return 0
        if self.pos < len(self.path):
            idx = self.path[self.pos]
        else:
            idx = 0
            self.new_branches.append(len(probs))
        self.pos += 1
        self.prob *= probs[idx]
        return idx

    def coin(self, h: float, key: tuple[int, int] = (0, 0)) -> bool:
        h = _check_h(h)
        if h >= 1.0:
            return True
        if h <= 0.0:
            return False
        return self._choose([h, 1.0 - h]) == 0

    def draw(self, weights: np.ndarray) -> int:
        w, total = _check_weights(weights)
        support = np.flatnonzero(w > 0)
        probs = (w[support] / total).tolist()
        return int(support[self._choose(probs)])


def enumerate_law(fn: Callable[[Source], Hashable], max_leaves: int = 10_000_000) -> dict:
    """Exact law of ``fn``'s return value over every branch of its coins and draws.

    ``fn`` is re-run once per leaf of its choice tree (replay), so it must be deterministic given
    its source's answers.  Branches of probability 0 are never taken.

    Args:
        fn: callable taking a Source and returning a hashable outcome.
        max_leaves: guard against runaway enumeration.
    Returns:
        dict outcome → probability (float64; sums to 1 up to rounding).
    Raises:
        RuntimeError: if more than ``max_leaves`` leaves are visited.
    """
    law: dict = defaultdict(float)
    for _, src, outcome in _replay_paths(fn, _ReplaySource, max_leaves, "enumerate_law: more than {} leaves"):
        law[outcome] += src.prob
    return dict(law)


def _replay_paths(fn, make_source, max_paths: int, too_many: str):
    """Depth-first replay of ``fn`` over its choice tree: yields (path, source, outcome) per leaf,
    ``make_source(path)`` answering the choices; RuntimeError(``too_many`` with max_paths) past
    ``max_paths`` leaves."""
    stack: list[tuple[int, ...]] = [()]
    count = 0
    while stack:
        path = stack.pop()
        src = make_source(path)
        outcome = fn(src)
        count += 1
        if count > max_paths:
            raise RuntimeError(too_many.format(max_paths))
        base = list(path)
        for depth, n_options in enumerate(src.new_branches):
            prefix = base + [0] * depth
            for alt in range(1, n_options):
                stack.append(tuple(prefix + [alt]))
        yield path, src, outcome


class DrawNotLastError(ValueError):
    """``enumerate_law_draw_last`` was given a function its shortcut does not apply to: a coin
    after the draw, a second draw, or an outcome that does not carry the drawn index as
    ``relabel`` says."""


class _DrawLastSource(_ReplaySource):
    """Replays coins like ``_ReplaySource``; the draw is not branched on but recorded (its
    support and normalised weights) and answered with the support's first (``pick`` = 0) or last
    (``pick`` = -1) index.  Any choice after the draw raises ``DrawNotLastError``."""

    __slots__ = ("final", "pick")

    def __init__(self, path: tuple[int, ...], pick: int = 0):
        super().__init__(path)
        self.final: tuple[np.ndarray, np.ndarray] | None = None
        self.pick = pick

    def _choose(self, probs: list[float]) -> int:
        if self.final is not None:
            raise DrawNotLastError("a coin was tossed after the draw")
        return super()._choose(probs)

    def draw(self, weights: np.ndarray) -> int:
        if self.final is not None:
            raise DrawNotLastError("a second draw")
        w, total = _check_weights(weights)
        support = np.flatnonzero(w > 0)
        self.final = (support, w[support] / total)
        return int(support[self.pick])


def enumerate_law_draw_last(fn: Callable[[Source], Hashable], relabel: Callable[[Hashable, int], Hashable],
                            max_paths: int = 10_000_000) -> dict:
    """The law ``enumerate_law(fn)`` returns, for a ``fn`` whose draw (if any) is its last random
    choice, in time linear in V: each path of coins is replayed once (twice if it ends in a draw),
    not once per token of the draw's support.

    A path ending in a draw of normalised weights ``w`` over its support gives, for every token x
    of the support, the outcome ``relabel(o, x)`` with probability ``P(path) · w[x]``, where o is
    the outcome with the support's first token drawn.  The rules draw once per iteration, the
    correction or the bonus, after every coin (module doc), so the drawn token only becomes the
    emitted token; this is checked on every such path: o must equal ``relabel(o, first token)``
    and a replay drawing the support's last token must return ``relabel(o, last token)`` with the
    same path probability.  Probabilities are the same floating-point products, summed per
    outcome in the same order, as ``enumerate_law``'s (the paths are visited in the same order).

    Args:
        fn: callable taking a Source and returning a hashable outcome.
        relabel: ``(outcome, token) -> outcome`` with the drawn token replaced by ``token``.
        max_paths: guard against runaway enumeration.
    Returns:
        dict outcome → probability (float64).
    Raises:
        DrawNotLastError: a coin or a second draw after the draw, or an outcome that does not
            change with the drawn token as ``relabel`` says.
        RuntimeError: more than ``max_paths`` paths.
    """
    law: dict = defaultdict(float)
    for path, src, outcome in _replay_paths(fn, _DrawLastSource, max_paths,
                                            "enumerate_law_draw_last: more than {} paths"):
        if src.final is None:
            law[outcome] += src.prob
            continue
        support, weights = src.final
        if relabel(outcome, int(support[0])) != outcome:
            raise DrawNotLastError(f"the outcome {outcome!r} does not carry the drawn token {int(support[0])}")
        if support.size > 1:
            last = _DrawLastSource(path, pick=-1)
            other = fn(last)
            if other != relabel(outcome, int(support[-1])) or last.prob != src.prob:
                raise DrawNotLastError(f"drawing token {int(support[-1])} instead of {int(support[0])} gave "
                                       f"{other!r}, not {relabel(outcome, int(support[-1]))!r}")
        for x, pr in zip(support.tolist(), (src.prob * weights).tolist()):
            law[relabel(outcome, x)] += pr
    return dict(law)
