"""Toy autoregressive models on a small vocabulary, for exact computation.

A model maps a prefix (a tuple of token ids, counted from the start of generation) to a
next-token probability vector.  Three kinds: context-free, a table ``prefix → probabilities``
with longest-suffix fallback (the model-file format of ``spectr-gbv exact``), and seeded
random prefix-dependent models whose every conditional is a Dirichlet draw.  Temperature
is a wrapper.  Joint probabilities of sub-blocks and whole block laws are derived here.
"""

from __future__ import annotations

import itertools
import json
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from spectr_gbv.reference.validation import check_probability_vector

Prefix = tuple[int, ...]


class ToyModel(ABC):
    """An autoregressive model over Ω = {0..V-1}.

    Subclasses implement ``_conditional(prefix)``; ``conditional`` validates and caches.
    """

    vocab_size: int

    def conditional(self, prefix: Iterable[int]) -> np.ndarray:
        """Next-token law after ``prefix``.

        Args:
            prefix: token ids (ints in [0, V)), counted from the start of generation.
        Returns:
            float64 array [V], read-only, non-negative, sums to 1.
        Raises:
            ValueError: if a token id is outside [0, V).
        """
        prefix = tuple(int(t) for t in prefix)
        for t in prefix:
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"prefix: token id {t} outside [0, {self.vocab_size})")
        cache = self.__dict__.setdefault("_row_cache", {})
        row = cache.get(prefix)
        if row is None:
            row = np.array(self._conditional(prefix), dtype=np.float64)
            row.setflags(write=False)
            cache[prefix] = row
        return row

    @abstractmethod
    def _conditional(self, prefix: Prefix) -> np.ndarray: ...

    def joint(self, block: Iterable[int], context: Iterable[int] = ()) -> float:
        """Joint probability Π_j P(block_j | context, block_<j)  (docs/rules.md §1).

        Args:
            block: token ids of the sub-block z.
            context: token ids before it.
        Returns:
            float64 probability of z given the context.
        """
        context = tuple(int(t) for t in context)
        prob = 1.0
        for t in block:
            prob *= float(self.conditional(context)[int(t)])
            context = context + (int(t),)
        return prob

    def block_law(self, length: int, context: Iterable[int] = ()) -> np.ndarray:
        """The law of the next ``length`` tokens as a dense array.

        Args:
            length: block length L ≥ 1.
            context: token ids before the block.
        Returns:
            float64 array of shape (V,)*L whose entry [z_1, …, z_L] is the joint probability.
        Raises:
            ValueError: if length < 1.
        """
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        context = tuple(int(t) for t in context)
        V = self.vocab_size
        law = np.ones(())
        for depth in range(length):
            rows = np.empty(law.shape + (V,))
            for z in itertools.product(range(V), repeat=depth):
                rows[z] = law[z] * self.conditional(context + z)
            law = rows
        return law

    def to_table(self, depth: int) -> "TableModel":
        """Tabulate every conditional for prefixes of length < ``depth`` (for model files)."""
        table = {}
        for n in range(depth):
            for z in itertools.product(range(self.vocab_size), repeat=n):
                table[z] = self.conditional(z)
        return TableModel(self.vocab_size, table)


class ContextFree(ToyModel):
    """The same next-token law after every prefix.

    Args:
        probs: [V] probability vector.
    Raises:
        ValueError: if probs is not a valid probability vector.
    """

    def __init__(self, probs: Iterable[float]):
        probs = check_probability_vector(np.asarray(list(probs), dtype=np.float64), "probs")
        self.vocab_size = int(probs.shape[0])
        self._probs = probs

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        return self._probs

    def __repr__(self) -> str:
        return f"ContextFree({self._probs.tolist()})"


class TableModel(ToyModel):
    """Conditionals given by a table; a prefix missing from the table falls back to its longest
    listed suffix (so a context-free model lists only the empty prefix).

    Args:
        vocab_size: V ≥ 1.
        conditionals: mapping from prefix (tuple of token ids) to a [V] probability vector;
            must contain the empty prefix ().
    Raises:
        ValueError: on a missing empty prefix, a token id outside [0, V), or an invalid row.
    """

    def __init__(self, vocab_size: int, conditionals: Mapping[Prefix, Iterable[float]]):
        if int(vocab_size) != vocab_size or vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        self.vocab_size = int(vocab_size)
        table: dict[Prefix, np.ndarray] = {}
        for prefix, row in conditionals.items():
            prefix = tuple(int(t) for t in prefix)
            for t in prefix:
                if not 0 <= t < vocab_size:
                    raise ValueError(
                        f"conditionals: prefix {prefix} has token id {t} outside [0, {vocab_size})"
                    )
            arr = np.asarray(list(row), dtype=np.float64)
            if arr.shape != (vocab_size,):
                raise ValueError(
                    f"conditionals[{prefix}]: expected {vocab_size} probabilities, got shape {arr.shape}"
                )
            table[prefix] = check_probability_vector(arr, f"conditionals[{prefix}]")
        if () not in table:
            raise ValueError('conditionals: the empty prefix "" must be listed')
        self.table = table

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        for start in range(len(prefix) + 1):
            row = self.table.get(prefix[start:])
            if row is not None:
                return row
        raise AssertionError("unreachable: the empty prefix is always listed")

    def to_json(self) -> dict:
        """The model-file object ``{"vocab_size": V, "conditionals": {"0,1": [...], ...}}``."""
        return {
            "vocab_size": self.vocab_size,
            "conditionals": {
                ",".join(str(t) for t in prefix): [float(x) for x in row]
                for prefix, row in sorted(self.table.items(), key=lambda kv: (len(kv[0]), kv[0]))
            },
        }


class RandomModel(ToyModel):
    """Seeded random prefix-dependent model: each conditional is an independent
    Dirichlet(concentration·1_V) draw determined by (seed, prefix).

    Small concentrations give peaked rows, large ones flat rows.  With ``zero_prob`` > 0 each
    token of each row is set to probability 0 with that chance (at least one token keeps mass),
    which exercises zero-probability tokens and disjoint supports.

    Args:
        vocab_size: V ≥ 1.
        seed: int ≥ 0.
        concentration: Dirichlet parameter > 0.
        zero_prob: chance in [0, 1) of zeroing each token.
    Raises:
        ValueError: on a parameter out of range.
    """

    def __init__(self, vocab_size: int, seed: int, concentration: float = 1.0, zero_prob: float = 0.0):
        if int(vocab_size) != vocab_size or vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        if not np.isfinite(concentration) or concentration <= 0:
            raise ValueError(f"concentration must be > 0, got {concentration!r}")
        if not 0.0 <= zero_prob < 1.0:
            raise ValueError(f"zero_prob must be in [0, 1), got {zero_prob!r}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.vocab_size = int(vocab_size)
        self.seed = int(seed)
        self.concentration = float(concentration)
        self.zero_prob = float(zero_prob)

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.vocab_size, len(prefix), *prefix])
        # Gamma draws normalised = Dirichlet; computed in a way that cannot give 0/0.
        g = rng.gamma(self.concentration, size=self.vocab_size)
        if self.zero_prob > 0:
            keep = rng.random(self.vocab_size) >= self.zero_prob
            keep[rng.integers(self.vocab_size)] = True
            g = np.where(keep, g, 0.0)
        if g.sum() <= 0:  # every gamma draw underflowed: a one-hot row is the limit law
            g = np.zeros(self.vocab_size)
            g[rng.integers(self.vocab_size)] = 1.0
        return g / g.sum()

    def __repr__(self) -> str:
        return (
            f"RandomModel(V={self.vocab_size}, seed={self.seed}, "
            f"concentration={self.concentration}, zero_prob={self.zero_prob})"
        )


class Tempered(ToyModel):
    """``base`` at temperature T: conditionals ∝ P(x | prefix)^(1/T).

    Args:
        base: a ToyModel.
        temperature: T > 0 (finite).
    Raises:
        ValueError: if temperature ≤ 0 or not finite.
    """

    def __init__(self, base: ToyModel, temperature: float):
        if not np.isfinite(temperature) or temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.base = base
        self.temperature = float(temperature)
        self.vocab_size = base.vocab_size

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        row = self.base.conditional(prefix)
        # log-space so that small T does not underflow every entry to 0
        with np.errstate(divide="ignore"):
            logits = np.log(row) / self.temperature
        logits -= logits[row > 0].max()
        out = np.where(row > 0, np.exp(logits), 0.0)
        return out / out.sum()


def load_model_file(path: str | Path) -> TableModel:
    """Read a model file ``{"vocab_size": V, "conditionals": {"": [...], "0,1": [...]}}``.

    Keys are comma-separated token ids of the prefix ("" for the empty prefix), in canonical
    form (ASCII decimal, no spaces, signs or leading zeros: ``parse_prefix_key``), each listed once.
    Raises:
        ValueError: on a malformed file (names the field and the problem), a key listed twice,
            a non-canonical key, or a number too large for a float.
        RecursionError: on JSON nested too deeply for the parser.
    """
    with open(path, encoding="utf-8") as fh:
        obj = json.load(fh, object_pairs_hook=_no_duplicate_keys)
    return model_from_json(obj, source=str(path))


def _no_duplicate_keys(pairs: list) -> dict:
    """``json`` object hook: refuse an object that lists the same key twice."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is listed twice in one object")
        out[key] = value
    return out


# A canonical prefix key: comma-separated ASCII decimal token ids, no spaces, no leading zeros.
PREFIX_KEY = re.compile(r"^(0|[1-9][0-9]*)(,(0|[1-9][0-9]*))*$")


def parse_prefix_key(key: str) -> Prefix:
    """The prefix of a model-file key ("" → (), "0,12" → (0, 12)).

    Raises:
        ValueError: a key that is not canonical ("00", " 1", "١", "-1", "1,,2"): two different
            keys must never name the same prefix.
    """
    if key == "":
        return ()
    if not isinstance(key, str) or not PREFIX_KEY.match(key):
        raise ValueError(f"conditionals key {str(key)[:40]!r} is not a prefix key: comma-separated "
                         "token ids in ASCII decimal without spaces, signs or leading zeros ('' for "
                         "the empty prefix)")
    return tuple(int(t) for t in key.split(","))


def model_from_json(obj: dict, source: str = "model") -> TableModel:
    """Build a TableModel from the parsed model-file object (see ``load_model_file``)."""
    if not isinstance(obj, dict) or "vocab_size" not in obj or "conditionals" not in obj:
        raise ValueError(f"{source}: expected an object with keys 'vocab_size' and 'conditionals'")
    V = obj["vocab_size"]
    integral = (isinstance(V, int) and not isinstance(V, bool)) or (isinstance(V, float) and V.is_integer())
    if not integral or V < 1:
        raise ValueError(f"vocab_size must be an integer >= 1, got {V!r}")
    V = int(V)
    if not isinstance(obj["conditionals"], dict):
        raise ValueError("conditionals must be an object mapping prefixes to probability lists, "
                         f"got {type(obj['conditionals']).__name__}")
    conds = {}
    for key, row in obj["conditionals"].items():
        prefix = parse_prefix_key(key)
        if prefix in conds:  # cannot happen with canonical keys; kept as the invariant
            raise ValueError(f"{source}: conditionals key {key!r} names the prefix {prefix} twice")
        if not isinstance(row, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in row):
            raise ValueError(f"conditionals[{prefix}] must be a list of {V} numbers, got {row!r:.60}")
        values = []
        for x in row:
            try:
                values.append(float(x))
            except OverflowError:
                raise ValueError(f"conditionals[{prefix}]: entry {len(values)} is an integer too large "
                                 "for a float (more than 308 digits)") from None
        conds[prefix] = values
    return TableModel(V, conds)


class PermutedZipf(ToyModel):
    """Seeded prefix-dependent model with a language model's rank profile: after each prefix the
    row is p_k ∝ k^(−exponent) over the vocabulary in a random order determined by (seed, prefix)
    (at V = 151,936 and exponent 1.1 the top token has 13 %, the top 100 tokens 57 %, and 29 % of
    the mass lies on tokens of probability below 10^-4, oracle.coarsen.llm_row's row).

    Args:
        vocab_size: V ≥ 2.  seed: int ≥ 0.  exponent: > 0.
    Raises:
        ValueError: on a parameter out of range.
    """

    def __init__(self, vocab_size: int, seed: int, exponent: float = 1.1):
        if int(vocab_size) != vocab_size or vocab_size < 2:
            raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        if not np.isfinite(exponent) or exponent <= 0:
            raise ValueError(f"exponent must be > 0, got {exponent!r}")
        self.vocab_size, self.seed, self.exponent = int(vocab_size), int(seed), float(exponent)
        ranks = np.arange(1, self.vocab_size + 1, dtype=np.float64) ** -self.exponent
        self._profile = ranks / ranks.sum()

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        order = np.random.default_rng([self.seed, self.vocab_size, len(prefix), *prefix]).permutation(self.vocab_size)
        row = np.empty(self.vocab_size)
        row[order] = self._profile
        return row

    def __repr__(self) -> str:
        return f"PermutedZipf({self.vocab_size}, {self.seed}, {self.exponent})"


class Mixture(ToyModel):
    """(1 − w)·a + w·b at every prefix: a draft that is close to a target (high acceptance).

    Args:
        a, b: ToyModels on the same vocabulary.
        weight: w in [0, 1].
    Raises:
        ValueError: on a vocabulary mismatch or w outside [0, 1].
    """

    def __init__(self, a: ToyModel, b: ToyModel, weight: float):
        if a.vocab_size != b.vocab_size:
            raise ValueError(f"vocabulary mismatch: {a.vocab_size} != {b.vocab_size}")
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {weight!r}")
        self.a, self.b, self.weight = a, b, float(weight)
        self.vocab_size = a.vocab_size

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        row = (1.0 - self.weight) * self.a.conditional(prefix) + self.weight * self.b.conditional(prefix)
        return row / row.sum()

    def __repr__(self) -> str:
        return f"Mixture({self.a!r}, {self.b!r}, {self.weight})"
