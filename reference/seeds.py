"""User seeds → generator seeds, backend-free (the engine, the certification harness)."""

from __future__ import annotations

import hashlib
import numbers
import secrets

# Bits of a fresh seed (``fresh_seed``): a 64-bit integer from the operating system's source.
FRESH_SEED_BITS = 64


def generator_seed(seed) -> int:
    """The ``torch.Generator`` seed of a user seed: any Python int → [0, 2^64).

    The first 8 bytes of SHA-256 of the seed's decimal text (sign included), so that distinct
    ints (negative ones and ints beyond 64 bits too) give distinct 64-bit seeds (``manual_seed``
    itself folds −1 onto 2^64 − 1 and refuses ≥ 2^64).  torch's CPU generator (Mersenne
    Twister) keeps only the low 32 bits of its seed, so on CPU two distinct seeds share a
    stream with probability 2^-32 (no longer for structured pairs such as s and s + 2^32); a
    CUDA generator (Philox) keeps all 64.

    Raises:
        ValueError: ``seed`` is not an integer (bool, float, str, ...), naming ``seed``.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    digest = hashlib.sha256(b"spectr-gbv seed %d" % int(seed)).digest()
    return int.from_bytes(digest[:8], "little")


def fresh_seed() -> int:
    """A fresh seed: ``secrets.randbits(64)``, an int in [0, 2^64) from the operating system's
    random source (distinct calls collide with probability 2^-64 per pair)."""
    return secrets.randbits(FRESH_SEED_BITS)


def resolve_seed(seed) -> int:
    """The seed a run uses: ``seed`` itself (any Python int, ``generator_seed`` accepts it), or a
    ``fresh_seed()`` when ``seed`` is None, so that runs without a seed differ and each can be
    replayed with the seed it reports.

    Raises:
        ValueError: ``seed`` neither None nor an integer (bool, float, str, ...), naming ``seed``.
    """
    if seed is None:
        return fresh_seed()
    generator_seed(seed)  # the check, with its message
    return int(seed)
