"""The seeds the certification harness sends: a tree of ``numpy.random.SeedSequence`` nodes.

Every random choice of a certification run hangs off one base seed (any Python int), through
nodes keyed by (case index, stream, call index):

    SeedSequence(entropy=[SEED_DOMAIN, zigzag(base seed)], spawn_key=(case, stream, call))

with the streams ``DRAFTS`` (the case's numpy Generator: drafts of fresh-draft cases, the
decoding of ``certify_lossless``), ``ROWS`` (the verifier's per-row seeds of call ``call``),
``CHECK_DRAFTS``, ``CHECK_SEEDS`` and ``CHECK_FRESH`` (the seed-contract checks of
oracle/seed_contract.py).  Row b of a call gets word b of ``generate_state(B, uint64)`` shifted
right by one bit: an int64 in [0, 2^63), accepted by numpy's ``default_rng``, torch's
``manual_seed`` and the int64 seed tensors of serving engines.

SeedSequence hashes its entropy and spawn key into its pool (O'Neill's seed_seq hash, numpy's
``SeedSequence``), so the seeds of distinct (base, case, call, row) are unrelated 63-bit words:
two rows share a seed with probability 2^-63 per pair, rows of one call are not consecutive
integers (a verifier that narrows a seed to float32, 24 bits of mantissa, keeps them apart:
two of B rows share a float32 value with probability about B²/2 · 2^-23/3, 0.33 expected
pairs at B = 4,096), and runs at base seeds s and s + 1 are independent replicates: no
(case, call) of one equals any of the other.  This replaces ``h(seed + c) + 0..B−1`` (a hash
of seed + chunk index, then consecutive integers), under which chunk c of seed s was chunk
c − 1 of seed s + 1 and a float32 cast made a whole chunk share one stream.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

# First entropy word of every node: keeps this tree apart from other SeedSequence users of the
# same integer (hex 5EED).
SEED_DOMAIN = 0x5EED_0000
# Streams (second word of the spawn key).
DRAFTS, ROWS, CHECK_DRAFTS, CHECK_SEEDS, CHECK_FRESH = range(5)


def _check_int(x, name: str, low: int | None = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {x!r}")
    if low is not None and x < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {x!r}")
    return int(x)


def zigzag(seed: int) -> int:
    """The non-negative int that SeedSequence takes for any Python int: 2s for s ≥ 0, −2s − 1
    for s < 0 (one-to-one, so distinct base seeds give distinct trees)."""
    return 2 * seed if seed >= 0 else -2 * seed - 1


@dataclass(frozen=True)
class CaseSeeds:
    """The seed tree of case ``case`` of a run at base seed ``seed`` (module doc).

    Attributes:
        seed: the run's base seed, any Python int.  case: the case's index in the run, ≥ 0.
    Raises:
        ValueError: ``seed`` not an integer, ``case`` not an integer ≥ 0.
    """

    seed: int
    case: int = 0

    def __post_init__(self):
        object.__setattr__(self, "seed", _check_int(self.seed, "seed", None))
        object.__setattr__(self, "case", _check_int(self.case, "case"))

    def node(self, stream: int, call: int = 0) -> np.random.SeedSequence:
        """The SeedSequence of (stream, call) in this case (module doc)."""
        return np.random.SeedSequence([SEED_DOMAIN, zigzag(self.seed)],
                                      spawn_key=(self.case, _check_int(stream, "stream"), _check_int(call, "call")))

    def _words(self, stream: int, call: int, B: int) -> np.ndarray:
        B = _check_int(B, "B")
        if B == 0:
            return np.zeros(0, dtype=np.int64)
        return (self.node(stream, call).generate_state(B, np.uint64) >> np.uint64(1)).astype(np.int64)

    def draft_rng(self) -> np.random.Generator:
        """The case's Generator for its own draws (drafts of fresh-draft cases, decoding)."""
        return np.random.default_rng(self.node(DRAFTS))

    def row_seeds(self, call: int, B: int) -> np.ndarray:
        """int64 [B] in [0, 2^63): the per-row seeds of the case's call ``call`` (≥ 0).

        Raises:
            ValueError: call or B not an integer ≥ 0.
        """
        return self._words(ROWS, call, B)

    def check_rng(self) -> np.random.Generator:
        """The Generator of the seed-contract checks' own draws (oracle/seed_contract.py)."""
        return np.random.default_rng(self.node(CHECK_DRAFTS))

    def check_seeds(self, B: int, fresh: bool = False) -> np.ndarray:
        """int64 [B] in [0, 2^63): the seeds of the seed-contract checks' batch; ``fresh=True``
        gives a second, unrelated set (the seed-dependence check)."""
        return self._words(CHECK_FRESH if fresh else CHECK_SEEDS, 0, B)
