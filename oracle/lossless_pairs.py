"""The (draft, target) pairs of ``oracle.lossless.certify_lossless``: what each one sees.

A pair is a draft model and a target model on one vocabulary (``reference.models.ToyModel``),
small enough that the target's law of the first L + 1 tokens and the lossless acceptance
ceiling are computed exactly.  Each default pair is there because a class of serving defects
is invisible without it (docs/guarantees.md, "What certify_lossless's pairs see"):

==========  ====  =========  ======  ====================================================
pair        V     L run at   K       sees
==========  ====  =========  ======  ====================================================
toy         2     ≤ 8        any     the released SpecTr-GBV's first-token law (docs/toy.md)
prefix      3     ≤ 4        any     prefix-dependent rows, long acceptances
far         5     ≤ 3        any     peaked rows, a draft far from the target
zeros       4     ≤ 2        any     draft tokens of target probability 0
one-hot     4     ≤ 4        any     one-hot draft rows (greedy, n-gram, prompt lookup)
wide        64    1          any     correction/bonus draws truncated to the top k ≤ 40
deep        2     ≤ 8        any     defects at draft depth ≥ 3 (L up to ENGINE_MAX_L)
multi       4     ≤ 3        ≥ 2     the second draft's branch (candidates drawn without
                                     replacement, rules that assume distinct drafts)
vocab       151,936  1       any     draws at a real vocabulary (top-k, narrow-dtype CDFs,
                                     tokens below a probability floor): first call only
vocab-32k   32,768   1       any     the same at V = 32,768 (a second pair for each of
                                     those defects)
==========  ====  =========  ======  ====================================================

A pair runs at L_pair = min(L, ``max_L``) (its tables and joint law must enumerate: V^L_pair
draft blocks per context, V^(L_pair + 1) joint cells) and only when K ≥ ``min_K``; the
result of a pair records the L it ran at and says so in its notes when it is below the L asked.
A ``VocabPair`` (the last two) cannot enumerate: it is context-free, runs one call per sample
(blocks of one token) at min(N, ``samples_cap``) samples, and tests the first emitted token's
law over its V tokens and the acceptance ceiling (``oracle.lossless``, "Pairs at a real
vocabulary").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from spectr_gbv.reference.models import ContextFree, Mixture, Prefix, RandomModel, ToyModel

__all__ = ["ToyPair", "VocabPair", "OneHot", "ZeroOnDraftMode", "default_pairs", "ENGINE_MAX_L", "VOCAB_SAMPLES"]

# The largest L the engine's automatic configuration can choose:
# gpu_backend.engine.defaults.L_CANDIDATES[-1] (not imported: oracle/ stays torch-free and
# below gpu_backend/; tests/oracle/test_lossless_pairs.py asserts the two agree).
ENGINE_MAX_L = 8
# The "deep" pair's models depend on the last MARKOV_ORDER tokens of the prefix (``_deep``).
MARKOV_ORDER = 3


@dataclass(frozen=True, eq=False)
class ToyPair:
    """A (draft, target) pair of toy models on one vocabulary.

    Attributes:
        name: label of the case.  draft, target: ``reference.models.ToyModel`` s.
        max_L: None, or the longest block the pair is run at: ``certify_lossless`` runs it at
            min(L, max_L) (e.g. 1 for the V = 64 pair, whose L + 1 = 3 token joint law would
            have 262,144 cells).  Integer ≥ 1 or None.
        min_K: the pair runs only when K ≥ min_K (2 for the pair that exercises the second
            draft's branch: at K = 1 it has none).
        sees: one line, what the pair is there to see.
    Raises:
        ValueError: max_L not None and not an integer ≥ 1, or min_K not an integer ≥ 1.
    """

    name: str
    draft: ToyModel
    target: ToyModel
    max_L: int | None = None
    min_K: int = 1
    sees: str = ""

    def __post_init__(self):
        for field_name, value, allow_none in (("max_L", self.max_L, True), ("min_K", self.min_K, False)):
            if value is None and allow_none:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"ToyPair {self.name!r}: {field_name} must be an integer >= 1"
                                 f"{' or None' if allow_none else ''}, got {value!r}")

    @property
    def V(self) -> int:
        return self.target.vocab_size

    def run_L(self, L: int) -> int:
        """The block length the pair runs at when ``L`` is asked: min(L, max_L)."""
        return L if self.max_L is None else min(L, int(self.max_L))


# A VocabPair runs at min(N, VOCAB_SAMPLES) samples: at V = 151,936 one sample hands the verifier
# K·3·V probabilities, and 5,000 samples give its coarsened first-token test δ = 0.078 (64 bins).
VOCAB_SAMPLES = 5_000


@dataclass(frozen=True, eq=False)
class VocabPair:
    """A (draft, target) pair at a real vocabulary: one draft row ``draft`` and one target row
    ``target`` (float64 [V], each summing to 1) after every prefix, run on the first call alone
    with blocks of one token (``oracle.lossless``, "Pairs at a real vocabulary").

    Attributes:
        name: label.  draft, target: float64 [V] rows.  sees: one line.
        samples_cap: the most samples the pair runs at (default ``VOCAB_SAMPLES``).
        min_K: the pair runs only when K ≥ min_K.
    Raises:
        ValueError: rows not 1-D of one length ≥ 2, not finite, negative or not summing to 1
            (within 1e-9); samples_cap or min_K not an integer ≥ 1 (samples_cap ≥ 2).
    """

    name: str
    draft: np.ndarray
    target: np.ndarray
    sees: str = ""
    samples_cap: int = VOCAB_SAMPLES
    min_K: int = 1

    def __post_init__(self):
        d, t = (np.asarray(x, dtype=np.float64) for x in (self.draft, self.target))
        if d.ndim != 1 or d.shape != t.shape or d.size < 2:
            raise ValueError(f"VocabPair {self.name!r}: draft and target must be 1-D rows of one length >= 2, "
                             f"got shapes {d.shape} and {t.shape}")
        for what, row in (("draft", d), ("target", t)):
            if not np.isfinite(row).all() or (row < 0).any() or abs(row.sum() - 1.0) > 1e-9:
                raise ValueError(f"VocabPair {self.name!r}: the {what} row must be finite, >= 0 and sum to 1")
        for field_name, value, low in (("samples_cap", self.samples_cap, 2), ("min_K", self.min_K, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"VocabPair {self.name!r}: {field_name} must be an integer >= {low}, got {value!r}")
        d.setflags(write=False)
        t.setflags(write=False)
        object.__setattr__(self, "draft", d)
        object.__setattr__(self, "target", t)

    @property
    def V(self) -> int:
        return int(self.target.size)

    @property
    def max_L(self) -> int:
        return 1

    def run_L(self, L: int) -> int:
        """1, whatever L is asked (one call per sample)."""
        return 1


def _vocab(name: str, V: int, seed: int) -> VocabPair:
    """A VocabPair of ``oracle.certify_cases.vocab_models(V, seed)``'s empty-prefix rows: the
    target a Zipf(1.1) row in a random order (29 % of its mass on tokens below 10^-4 at V =
    151,936, 23 % at V = 32,768), the draft an even mixture of it with another such row."""
    from spectr_gbv.oracle.certify_cases import vocab_models

    draft, target = vocab_models(V, seed)
    return VocabPair(name, np.array(draft.conditional(())), np.array(target.conditional(())),
                     sees=f"draws at V = {V:,}: top-k, narrow-dtype CDFs, tokens below a probability floor")


class OneHot(ToyModel):
    """A greedy drafter: after every prefix, probability 1 on ``base``'s most likely token
    (the smallest id among ties), 0 elsewhere: the draft rows an n-gram, prompt-lookup or
    greedy (temperature 0) drafter hands the verifier.

    Args:
        base: a ToyModel.
    """

    def __init__(self, base: ToyModel):
        self.base, self.vocab_size = base, base.vocab_size

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        row = np.zeros(self.vocab_size)
        row[int(np.argmax(self.base.conditional(prefix)))] = 1.0
        return row

    def __repr__(self) -> str:
        return f"OneHot({self.base!r})"


class ZeroOnDraftMode(ToyModel):
    """``base`` with probability 0 on ``draft``'s most likely token after every prefix
    (renormalised): the draft proposes, with its largest probability, a token the target never
    emits, so a verifier that ever accepts (or emits) such a token emits a zero-probability
    outcome.

    Args:
        base, draft: ToyModels on one vocabulary; ``base`` must keep mass off the draft's mode.
    Raises:
        ValueError: vocabulary mismatch.  (A row with all of its mass on the draft's mode is
            refused when it is computed.)
    """

    def __init__(self, base: ToyModel, draft: ToyModel):
        if base.vocab_size != draft.vocab_size:
            raise ValueError(f"vocabulary mismatch: {base.vocab_size} != {draft.vocab_size}")
        self.base, self.draft, self.vocab_size = base, draft, base.vocab_size

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        row = np.array(self.base.conditional(prefix), dtype=np.float64)
        row[int(np.argmax(self.draft.conditional(prefix)))] = 0.0
        if row.sum() <= 0:
            raise ValueError(f"ZeroOnDraftMode: the base row after {prefix} has all its mass on the draft's mode")
        return row / row.sum()

    def __repr__(self) -> str:
        return f"ZeroOnDraftMode({self.base!r}, mode of {self.draft!r})"


def _zeros() -> ToyPair:
    """"zeros", V = 4, prefix-dependent: draft RandomModel(4, 600, 1.0); target
    RandomModel(4, 601, 1.0) with probability 0 on the draft's most likely token after every
    prefix (``ZeroOnDraftMode``).  Sees: a verifier that accepts a draft token of target
    probability 0 (the draft proposes one with probability ≥ 1/4 at every position) — any
    emission of such a token is a count on a zero-probability cell, and the G-tests fail
    outright (p = 0).  The built-in pairs before it had no zeros.  L ≤ 2 (``max_L``): the
    defect shows at the first token, and its global OT at K = 2 stays small."""
    draft = RandomModel(4, 600, 1.0)
    return ToyPair("zeros", draft, ZeroOnDraftMode(RandomModel(4, 601, 1.0), draft), max_L=2,
                     sees="draft tokens of target probability 0")


def _one_hot() -> ToyPair:
    """"one-hot", V = 4, prefix-dependent: the draft is greedy (``OneHot``) on a 50 % mixture
    of the target RandomModel(4, 610, 1.0) with RandomModel(4, 611, 1.0); every draft row is an
    indicator, so the K drafts of a call are equal.  Sees: a verifier whose one-hot path (the
    rows n-gram, prompt-lookup and greedy drafters send) differs from its general path, e.g. a
    correction drawn from q instead of (q − p)+ = q without the drafted token."""
    target = RandomModel(4, 610, 1.0)
    return ToyPair("one-hot", OneHot(Mixture(target, RandomModel(4, 611, 1.0), 0.5)), target, max_L=4,
                     sees="one-hot draft rows (greedy, n-gram, prompt-lookup drafters)")


def _wide() -> ToyPair:
    """"wide", V = 64, run at L = 1 whatever L is asked (``max_L`` = 1: at L = 1 the joint law
    of the first 2 tokens has 4,096 cells; at L = 2 it would have 262,144): target
    RandomModel(64, 700, 5.0) (flat rows), draft RandomModel(64, 701, 0.1) (peaked: a correction
    after 72 % of the first calls, its residual spread over most of the 64 tokens).  Sees: correction and bonus draws
    truncated to the top k tokens (k = 20 or 40, common sampler defaults) — identical to the
    exact draws whenever V ≤ k, so no pair with V ≤ 5 can see it; here the first token's law
    moves by TV 0.30 (k = 20) and 0.062 (k = 40) (exact; tests/oracle/test_lossless_pairs.py)."""
    return ToyPair("wide", RandomModel(64, 701, 0.1), RandomModel(64, 700, 5.0), max_L=1,
                     sees="correction/bonus draws truncated to the top k (V = 64 > k = 20, 40)")


def _deep() -> ToyPair:
    """"deep", V = 2, run at L up to ``ENGINE_MAX_L`` = 8 (the largest L ``generate``'s
    automatic configuration chooses): target RandomModel(2, 620, 1.0), draft a 30 % mixture of
    it with RandomModel(2, 621, 1.0), both tabulated as Markov models of order
    ``MARKOV_ORDER`` = 3 (``ToyModel.to_table``: the row after a prefix is the random row after
    its last 3 tokens; at L = 8 the tables reach prefixes of 16 tokens, whose 2^16 distinct
    random rows would take a minute to draw), so drafts are accepted far into the
    block (the call reaches draft depth 3 with probability ≈ 0.8 at the root) and rejections
    still happen at every depth.  V = 2 keeps the 2^L blocks per context and the 2^(L+1)
    joint cells small at L = 8.  Sees: a defect confined to draft depth ≥ 3 (only blocks of
    L ≥ 4 have it), through the per-position tests (the law of the token at position d given
    the emitted prefix, d = 1..L)."""
    target = RandomModel(2, 620, 1.0).to_table(MARKOV_ORDER + 1)
    other = RandomModel(2, 621, 1.0).to_table(MARKOV_ORDER + 1)
    return ToyPair("deep", Mixture(target, other, 0.3), target, max_L=ENGINE_MAX_L,
                     sees=f"defects at draft depth >= 3, L up to {ENGINE_MAX_L}")


def _multi() -> ToyPair:
    """"multi", V = 4, prefix-dependent, for K ≥ 2 only (``min_K`` = 2): draft
    RandomModel(4, 642, 0.3) (peaked rows: two i.i.d. drafts often repeat their first token),
    target RandomModel(4, 1642, 0.5).  Chosen by exact computation over seeds and
    concentrations (tests/oracle/test_lossless_pairs.py pins it) so that the second draft's
    branch carries mass: at the root the first draft is rejected with probability 0.93, and a
    K = 2 rule for candidates drawn without replacement (recursive rejection sampling without
    replacement, Jeon et al. 2024), run on i.i.d. drafts, emits a first token whose law is off
    by TV 0.66 (on "toy", "prefix" and "far": 0, 0 and 0.0008).  L ≤ 3: the global OT's LP
    at K = 2 stays small (64 draft blocks)."""
    return ToyPair("multi", RandomModel(4, 642, 0.3), RandomModel(4, 1642, 0.5), max_L=3, min_K=2,
                     sees="the second draft's branch (rules for drafts without replacement)")


@functools.lru_cache(maxsize=1)
def default_pairs() -> tuple[ToyPair, ...]:
    """The built-in pairs (one instance per process, so the models' row caches are shared), in
    this order (module table; each pair's own doc says what it sees):

    - "toy": context-free, draft (2/3, 1/3), target (1/3, 2/3), V = 2 (docs/toy.md: the released
      SpecTr-GBV emits a first token of the wrong law at K = 2); L ≤ ``ENGINE_MAX_L``;
    - "prefix": ``oracle.certify_cases.toy_models(3, 100)``, V = 3, prefix-dependent, the draft
      a 50 % mixture of the target and another random model (long acceptances); L ≤ 4;
    - "far": RandomModel(5, 200, 0.5) drafting for RandomModel(5, 300, 0.5), V = 5,
      prefix-dependent, peaked rows, draft far from the target; L ≤ 3;
    - "zeros", "one-hot", "wide", "deep", "multi": ``_zeros``, ``_one_hot``, ``_wide``,
      ``_deep``, ``_multi`` (target zeros under the draft; one-hot draft rows; V = 64 at L = 1;
      depth up to L = 8; the second draft's branch, K ≥ 2 only);
    - "vocab", "vocab-32k": ``VocabPair`` s at V = 151,936 and 32,768 (``_vocab``; seeds 31, 32).
    """
    from spectr_gbv.oracle.certify_cases import toy_models

    prefix_draft, prefix_target = toy_models(3, 100)
    return (ToyPair("toy", ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]), max_L=ENGINE_MAX_L,
                      sees="the released SpecTr-GBV's first-token law (docs/toy.md)"),
            ToyPair("prefix", prefix_draft, prefix_target, max_L=4,
                      sees="prefix-dependent rows, long acceptances"),
            ToyPair("far", RandomModel(5, 200, 0.5), RandomModel(5, 300, 0.5), max_L=3,
                      sees="peaked rows, a draft far from the target"),
            _zeros(), _one_hot(), _wide(), _deep(), _multi(),
            _vocab("vocab", 151_936, 31), _vocab("vocab-32k", 32_768, 32))
