"""Standard certification cases, torch-free: toy draft blocks (V ≤ 5), random rows at
V = 4,096, each rule's branch-coverage case (also run by the project's own plan,
certify/verifiers/run.py), one-hot draft rows, multi-draft branch cases, blocks of the
largest L the engine chooses, and the law-level planted case (the released SpecTr-GBV against
the target's first-token law).  ``case_family`` builds the public certifier's families
(oracle.harness.certify_verifier)."""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.models import ContextFree, Mixture, PermutedZipf, RandomModel, ToyModel
from spectr_gbv.reference.randomness import SamplingSource
from spectr_gbv.reference.rules import registry

from spectr_gbv.oracle.certify import FirstTokenCase, FixedCase



def fixed_case(name: str, rule: str, draft: ToyModel, target: ToyModel, K: int, L: int, seed: int,
               reference_rule: str | None = None, expect_pass: bool = True,
               backend_dtype: str = "float32") -> FixedCase:
    """K draft blocks of L tokens sampled (seeded) from ``draft``, with the verifier's rows."""
    dec = Decoder(draft, target, K, L)
    state = DecodeState()
    drafts = dec.draft_blocks(state, SamplingSource(seed))
    tokens, dp, tp = dec.block_inputs(state, drafts)
    return FixedCase(name, rule, reference_rule or rule, tokens, dp, tp, expect_pass, backend_dtype)


def toy_models(V: int, seed: int, concentration: float = 1.0) -> tuple[ToyModel, ToyModel]:
    """A prefix-dependent (draft, target) pair with a draft close enough for long acceptances."""
    target = RandomModel(V, seed, concentration)
    draft = Mixture(target, RandomModel(V, seed + 7919, concentration), 0.5)
    return draft, target


def coverage_models(V: int, seed: int) -> tuple[ToyModel, ToyModel]:
    """A prefix-dependent (draft, target) pair drawn independently (Dirichlet(1) rows, seeds
    ``seed`` and ``seed + 1000``): a draft far enough from the target that every depth's
    correction, the bonus and τ = 0 all have mass (``coverage_case``)."""
    return RandomModel(V, seed, 1.0), RandomModel(V, seed + 1000, 1.0)


# -- branch coverage (tests/oracle/test_case_coverage.py) ------------------------------------------

COVERAGE_L = 3
COVERAGE_FLOOR = 0.02


def coverage_case(rule: str, backend_dtype: str = "float32") -> FixedCase:
    """The rule's branch-coverage case: V, K, the models' and the drafts' seeds from its spec's
    ``coverage_seeds`` (``coverage_models(V, models_seed)``, K drafts of ``COVERAGE_L`` = 3
    tokens), rows rounded to ``backend_dtype`` (float32 in the project's plan,
    certify/verifiers/run.py).  Every outcome class of oracle.branches — τ = each of
    0..L (the correction at every depth, the bonus), the weighted correction at every inner
    depth, every draft, the Algorithm 2 record — has exact probability ≥ ``COVERAGE_FLOOR``
    (tests/oracle/test_case_coverage.py, float32 rows), so a defect confined to one branch moves
    the law by at least 0.02 × its effect inside the branch.

    Raises:
        ValueError: unknown rule, or a rule without ``coverage_seeds``.
    """
    seeds = registry.spec(rule).coverage_seeds
    if seeds is None:
        raise ValueError(f"rule {rule!r} has no coverage_seeds (RuleSpec): no branch-coverage case")
    V, K, models_seed, draft_seed = seeds
    return fixed_case(f"{rule} coverage V={V} K={K} L={COVERAGE_L} {backend_dtype}", rule,
                      *coverage_models(V, models_seed), K, COVERAGE_L, draft_seed, backend_dtype=backend_dtype)


def large_models(V: int = 4096, seed: int = 0) -> tuple[ToyModel, ToyModel]:
    """Random rows at a realistic vocabulary: peaked Dirichlet target, draft a 40 % mixture."""
    target = RandomModel(V, seed, 0.05)
    draft = Mixture(target, RandomModel(V, seed + 104729, 0.05), 0.4)
    return draft, target


def released_rule_against_target(K: int = 2, L: int = 2) -> FirstTokenCase:
    """The released SpecTr-GBV checked against the target's law (the toy of docs/toy.md): must fail,
    P(first = a) = 4125/13328 instead of 1/3 at K = L = 2."""
    return FirstTokenCase(f"spectr_gbv vs target law, toy K={K} L={L}", "spectr_gbv",
                          ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]), K, L, expect_pass=False)


def lossless_against_target(rule: str, K: int = 2, L: int = 2) -> FirstTokenCase:
    """A lossless rule on the same law-level check: must pass."""
    K = registry.default_K(rule, K)
    return FirstTokenCase(f"{rule} vs target law, toy K={K} L={L}", rule,
                          ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]), K, L)


# -- the built-in case families of the public API (oracle.harness.certify_verifier) -------------

FAMILIES = ("toy", "prefix", "large", "vocab", "zeros", "disjoint", "equal", "coverage", "distinctive", "onehot",
            "branches", "deep")

# What each family sees that the others do not (docs/guarantees.md, "What each certification can
# and cannot see"): the line a report prints for a family the caller left out of ``families=``.
FAMILY_SEES = {
    "toy": "V = 3 prefix-dependent rows, draft close to the target (long acceptances)",
    "prefix": "V = 5 rows depending on the whole prefix, draft far from the target",
    "large": "V = 4,096 peaked rows: corrections or bonus draws truncated to the top k, narrow-dtype CDFs",
    "vocab": "V = 151,936 (Qwen2.5's vocabulary) rows of a real model's shape, their likely tokens at ids ≥ 65,536 "
             "(V − 1 drafted): token ids kept in 16 bits, draws at a real vocabulary (top-k, narrow-dtype CDFs, "
             "tokens below a probability floor)",
    "zeros": "target probability 0 on drafted tokens (a zero-probability token accepted)",
    "disjoint": "near-disjoint rows (the residual carries almost everything)",
    "equal": "p = q (every draft accepted by a lossless single-path rule)",
    "coverage": "every outcome class of the rule's code ≥ 0.02 (weighted corrections, the Algorithm 2 record)",
    "distinctive": "the rule's toy case at TV ≥ 0.05 from the other multi-draft rules",
    "onehot": "one-hot draft rows (n-gram, prompt-lookup and greedy drafters)",
    "branches": "two drafts sharing their first token (multi-draft branches)",
    "deep": "blocks of L = 8 (defects at depth ≥ 3)",
}

# The largest block length the engine's auto-configuration chooses: the last of
# gpu_backend.engine.defaults.L_CANDIDATES (oracle/ does not import gpu_backend/, so the value is
# repeated here; tests/oracle/test_public_cases.py asserts that the two agree).
DEEP_L = 8

# The "deep" family's models and drafts: toy_models(3, DEEP_SEED), drafts seeded DEEP_SEED, K = 1
# (single-draft rules) or 2.  Chosen by a scan of seeds 0-59: on it every registered rule puts
# probability ≥ 0.44 on a correction at depth 3..7 (tests/oracle/test_public_cases.py), so a
# defect confined to depths ≥ 3 moves the law by ≥ 0.44 × its effect inside those branches.
DEEP_SEED = 5

# The "branches" family (K = 2 multi-draft, V = 3, L = COVERAGE_L): per registered multi-draft
# rule, its models ("toy": toy_models(3, seed); "coverage": coverage_models(3, seed)) and the two
# draft blocks, which share their first token and differ at the second (the merged draft tree
# has a branch: a rule written for distinct candidates drawn without replacement, which treats
# the two drafts as separate chains, differs there).  Chosen by a scan over the models' seeds
# 0-19 and every such pair of blocks: every outcome class of oracle.branches but the weighted
# corrections (which the "coverage" family covers) has exact probability ≥ COVERAGE_FLOOR — the
# correction at every depth, the bonus, both drafts, the Algorithm 2 record
# (tests/oracle/test_public_cases.py).  A rule registered at run time has none: the family is
# skipped with a note.
BRANCHES_CASES = {
    "spectr": ("toy", 0, (1, 0, 0), (1, 2, 0)),
    "spectr_gbv": ("toy", 0, (0, 0, 0), (0, 1, 2)),
    "spectr_gbv_fixed": ("toy", 0, (0, 0, 0), (0, 1, 2)),
    "kseq_gbv": ("toy", 0, (1, 0, 0), (1, 2, 0)),
    "kseq_bv": ("toy", 0, (1, 0, 0), (1, 2, 0)),
    "traversal": ("coverage", 4, (0, 0, 0), (0, 1, 0)),
    "mdbv": ("coverage", 2, (2, 0, 0), (2, 1, 1)),
    "mdbv_kseq": ("coverage", 2, (2, 0, 0), (2, 1, 1)),
}


# The "vocab" family: Qwen2.5's vocabulary, blocks of one token (the cost of a case is the rows it
# hands over, N·K·(2L + 1)·V probabilities: at L = 1, 3·151,936 per row and draft).
VOCAB_V = 151_936
VOCAB_L = 1
VOCAB_SEED = 31
# The "vocab" case runs at min(N, VOCAB_SAMPLES): 5,000 rows hand over 2.3·10^9 probabilities,
# four times the V = 4,096 case at N = 20,000.  Its rows are a real model's shape (``HighIdRows``):
# the joint G-test states δ ≤ 0.2 on the whole law there (tests/oracle/test_vocab_family.py).
VOCAB_SAMPLES = 5_000
# Token ids at and above this do not fit 16 bits: the "vocab" case drafts and emits them on purpose
# (a verifier that keeps ids in uint16 or int16 wraps them).
ID_WRAP = 2**16


def vocab_models(V: int = VOCAB_V, seed: int = VOCAB_SEED) -> tuple[ToyModel, ToyModel]:
    """(draft, target) at a real vocabulary: the target ``reference.models.PermutedZipf(V,
    seed)`` (Zipf(1.1) by rank in a random order per prefix: 29 % of each row's mass on tokens
    below 10^-4 at V = 151,936), the draft an even mixture of it and ``PermutedZipf(V, seed +
    7919)``."""
    target = PermutedZipf(V, seed)
    return Mixture(target, PermutedZipf(V, seed + 7919), 0.5), target


class HighIdRows(ToyModel):
    """A real model's row at a real vocabulary, its likely tokens at ids that need 17 bits.

    After each prefix: mass 1 − ``tail`` on a head of ``head`` tokens with Zipf(``exponent``)
    weights by rank, the head's ids drawn in [``ID_WRAP``, V − 1) per (``ids_seed``, prefix) plus
    V − 1 itself, so models of one ``ids_seed`` share their head's ids and differ in its order
    (ranks shuffled per (``seed``, prefix); V − 1 at rank ``top_rank`` when given); mass ``tail``
    on the whole vocabulary, a share ``zipf_share`` of it as ``PermutedZipf(V, seed + 1)`` and the
    rest flat (each token 1/V of it: 10^-7–10^-6, the tail a probability floor or a float16 CDF
    drops).

    Args:
        vocab_size: V > ``ID_WRAP``.  ids_seed, seed: ints ≥ 0.  head: 2 ≤ head < V − ID_WRAP.
        exponent: > 0.  tail, zipf_share: in [0, 1).  top_rank: None or 1..head.
    Raises:
        ValueError: a parameter out of range.
    """

    def __init__(self, vocab_size: int, ids_seed: int, seed: int, head: int = 32, exponent: float = 1.0,
                 tail: float = 0.06, zipf_share: float = 0.3, top_rank: int | None = None):
        if int(vocab_size) != vocab_size or vocab_size <= ID_WRAP:
            raise ValueError(f"vocab_size must be an integer > {ID_WRAP}, got {vocab_size!r}")
        if not 2 <= head < vocab_size - ID_WRAP:
            raise ValueError(f"head must lie in [2, {vocab_size - ID_WRAP}), got {head!r}")
        if not exponent > 0 or not 0 <= tail < 1 or not 0 <= zipf_share < 1:
            raise ValueError(f"need exponent > 0 and tail, zipf_share in [0, 1); got {exponent!r}, {tail!r}, "
                             f"{zipf_share!r}")
        if top_rank is not None and not 1 <= top_rank <= head:
            raise ValueError(f"top_rank must be None or in [1, {head}], got {top_rank!r}")
        self.vocab_size, self.ids_seed, self.seed, self.head = int(vocab_size), int(ids_seed), int(seed), int(head)
        self.exponent, self.tail, self.zipf_share = float(exponent), float(tail), float(zipf_share)
        self.top_rank = top_rank
        weights = np.arange(1, head + 1, dtype=np.float64) ** -self.exponent
        self._head = weights / weights.sum()
        self._zipf = PermutedZipf(self.vocab_size, self.seed + 1)

    def _conditional(self, prefix) -> np.ndarray:
        V = self.vocab_size
        ids = ID_WRAP + np.random.default_rng([self.ids_seed, V, len(prefix), *prefix]).choice(
            V - 1 - ID_WRAP, self.head - 1, replace=False)
        ids = np.concatenate([[V - 1], ids])
        ranked = ids[np.random.default_rng([self.seed, V, len(prefix), *prefix]).permutation(self.head)]
        if self.top_rank is not None:
            at = int(np.flatnonzero(ranked == V - 1)[0])
            ranked[[at, self.top_rank - 1]] = ranked[[self.top_rank - 1, at]]
        row = np.full(V, self.tail * (1.0 - self.zipf_share) / V)
        if self.zipf_share:
            row += self.tail * self.zipf_share * self._zipf.conditional(prefix)
        row[ranked] += (1.0 - self.tail) * self._head
        return row / row.sum()

    def __repr__(self) -> str:
        return (f"HighIdRows({self.vocab_size}, {self.ids_seed}, {self.seed}, {self.head}, {self.exponent}, "
                f"{self.tail}, {self.zipf_share}, {self.top_rank})")


def vocab_case_models(V: int = VOCAB_V, seed: int = VOCAB_SEED) -> tuple[ToyModel, ToyModel]:
    """(draft, target) of the "vocab" case: target ``HighIdRows(V, seed, seed, top_rank=3)``
    (32 head tokens, Zipf(1) by rank, 94 % of the mass; V − 1 third), draft the even mixture of
    it and ``HighIdRows(V, seed, seed + 7919, tail=0.02, top_rank=1)`` (the same head ids in
    another order, V − 1 first, a lighter tail, so the residual (q − p)_+ keeps tail mass)."""
    target = HighIdRows(V, seed, seed, top_rank=3)
    other = HighIdRows(V, seed, seed + 7919, tail=0.02, top_rank=1)
    return Mixture(target, other, 0.5), target


def vocab_case(rule: str, K: int, backend_dtype: str = "float64") -> FixedCase:
    """The "vocab" case, run at min(N, ``VOCAB_SAMPLES``) = 5,000 rows: ``vocab_case_models()``,
    blocks of ``VOCAB_L`` = 1 token, the K drafts the K tokens of highest id among those of
    target probability ≥ 10^-3 whose token-level acceptance q/p lies in [0.4, 0.6] — V − 1 first
    — so that ids ≥ ``ID_WRAP`` = 65,536 are drafted, accepted and emitted on purpose (a verifier
    that keeps token ids in 16 bits moves nearly all of the law).  SD accepts about half the time,
    so the correction row and the bonus row both carry mass.

    Raises:
        ValueError: unknown rule, K ≠ 1 for a single-draft rule, fewer than K such tokens.
    """
    draft, target = vocab_case_models()
    q, p = target.conditional(()), draft.conditional(())
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / p, 0.0)
    candidates = np.flatnonzero((ratio >= 0.4) & (ratio <= 0.6) & (q >= 1e-3) & (np.arange(q.size) >= ID_WRAP))
    if candidates.size < K:
        raise ValueError(f"vocab_case: {candidates.size} tokens of q ≥ 10^-3 with q/p in [0.4, 0.6], fewer than "
                         f"K = {K}")
    chosen = candidates[::-1][:K]
    tokens, dp, tp = Decoder(draft, target, K, VOCAB_L).block_inputs(DecodeState(), [(int(x),) for x in chosen])
    return FixedCase(f"{rule} vocab V={VOCAB_V} K={K} L={VOCAB_L} {backend_dtype}", rule, rule, tokens, dp, tp,
                     backend_dtype=backend_dtype, samples_cap=VOCAB_SAMPLES)


class FamilyNotApplicable(ValueError):
    """A built-in family has no case for this rule and K (e.g. "branches" for a single-draft
    rule, "coverage" for a rule without ``coverage_seeds``): ``case_family`` raises it,
    oracle.harness.certify_verifier skips the family with this message as its note."""


def one_hot_draft_case(case: FixedCase) -> FixedCase:
    """``case`` with each draft row replaced by the indicator of its drafted token: the draft
    of n-gram / prompt-lookup / greedy-draft speculation, which vLLM's rejection sampler takes as
    ``draft_probs=None`` (gpu_backend/adapters/vllm_layout.py).

    The expected law is then the rule's with p = indicator: for "sd", X_i is accepted with
    probability min(1, q(X_i)/1) = q(X_i) and a rejection emits a token ∝ (q − 1_{X_i})_+, i.e.
    ∝ q with X_i zeroed; the target rows are those of ``case`` (its rounded backend rows, so
    the dtype's rounding is not applied twice), the name gets " one-hot drafts".

    With K ≥ 2 every draft becomes a copy of draft 0 (its tokens and target rows): K i.i.d.
    drafts from a one-hot draft law are identical, and drafts that differ at a shared prefix
    would each claim a row that gives the others' tokens draft probability 0 — an input no
    drafter can produce (the reference rules would divide by p(x) = 0 on it).

    Raises:
        ValueError: ``case`` is not a FixedCase.
    """
    if not isinstance(case, FixedCase):
        raise ValueError(f"one_hot_draft_case takes a FixedCase, got {type(case).__name__}")
    K = case.draft_tokens.shape[0]
    tokens = np.repeat(case.draft_tokens[:1], K, axis=0)  # [K, L]: K copies of draft 0
    target = np.repeat(case.backend_target_probs[:1], K, axis=0)  # [K, L + 1, V]
    one_hot = np.zeros(tokens.shape + (case.V,))  # [K, L, V] (np.eye(V) would be V² at a real V)
    np.put_along_axis(one_hot, tokens[..., None], 1.0, axis=-1)
    name = case.name if case.name.endswith(" one-hot drafts") else case.name + " one-hot drafts"
    return FixedCase(name, case.rule, case.reference_rule, tokens, one_hot,
                     target, case.expect_pass, case.backend_dtype, case.samples_cap)


def _zero_target_mass(case: FixedCase) -> FixedCase:
    """The case with target probability 0 where a verifier could wrongly accept: on the tokens
    drafted at the last depth L − 1 (every draft; in every row of the same prefix), and at depth
    0 on the first tokens of drafts 1..K−1 that differ from draft 0's (rows renormalised).  The
    depths before L − 1 keep draft 0's tokens possible, so τ reaches L − 1 with positive
    probability and the refusal is tested where the drafts land deepest; at L = 1 every drafted
    token has target probability 0 (τ = 0 surely).

    Raises:
        ValueError: a row would lose all its mass (the drafts cover its support).
    """
    tp = case.target_probs.copy()
    tokens = case.draft_tokens
    K, L = tokens.shape
    zeros = {L - 1: range(K)} if L > 1 else {0: range(K)}
    if L > 1:
        zeros[0] = [k for k in range(1, K) if tokens[k, 0] != tokens[0, 0]]
    for depth, drafts in zeros.items():
        for k in drafts:
            x = int(tokens[k, depth])
            for j in range(K):  # every draft whose rows at this depth are the same prefix's
                if np.array_equal(tokens[j, :depth], tokens[k, :depth]):
                    tp[j, depth, x] = 0.0
    sums = tp.sum(-1)
    if not (sums > 0).all():
        raise ValueError(f"family 'zeros': the {K} drafts cover the whole support of a target row; "
                         "use fewer drafts or another seed")
    tp /= sums[..., None]
    return FixedCase(case.name, case.rule, case.reference_rule, case.draft_tokens, case.draft_probs,
                     tp, case.expect_pass, case.backend_dtype)


def _near_disjoint(case: FixedCase, leak: float = 1e-3) -> FixedCase:
    """Target rows put 1 − ``leak`` on the tokens the draft row makes least likely and ``leak``
    spread like the draft: acceptance is rare and the residual carries almost everything."""
    dp = case.draft_probs
    low = (dp <= np.quantile(dp, 0.5, axis=-1, keepdims=True)).astype(np.float64)
    far = low / low.sum(-1, keepdims=True)
    tp = case.target_probs.copy()
    tp[:, :-1] = (1 - leak) * far + leak * dp
    return FixedCase(case.name, case.rule, case.reference_rule, case.draft_tokens, dp, tp,
                     case.expect_pass, case.backend_dtype)


def branches_case(rule: str, backend_dtype: str = "float32") -> FixedCase:
    """The "branches" case of a multi-draft rule: K = 2 drafts of ``COVERAGE_L`` tokens that
    share their first token (``BRANCHES_CASES``), rows rounded to ``backend_dtype``.

    Raises:
        FamilyNotApplicable: a single-draft rule, or a rule without an entry in BRANCHES_CASES.
    """
    if registry.is_single_draft(rule):
        raise FamilyNotApplicable(f"family 'branches': rule {rule!r} is single-draft (K = 1 has no "
                                  "multi-draft branches)")
    if rule not in BRANCHES_CASES:
        raise FamilyNotApplicable(f"family 'branches': no pinned case for rule {rule!r} "
                                  "(oracle.certify_cases.BRANCHES_CASES)")
    kind, seed, a, b = BRANCHES_CASES[rule]
    models = toy_models(3, seed) if kind == "toy" else coverage_models(3, seed)
    dec = Decoder(*models, 2, COVERAGE_L)
    tokens, dp, tp = dec.block_inputs(DecodeState(), [tuple(a), tuple(b)])
    return FixedCase(f"{rule} branches V=3 K=2 L={COVERAGE_L} {backend_dtype}", rule, rule, tokens, dp, tp,
                     backend_dtype=backend_dtype)


def deep_case(rule: str, backend_dtype: str = "float64") -> FixedCase:
    """The "deep" case: V = 3 toy models (``toy_models(3, DEEP_SEED)``), K = 1 for a
    single-draft rule else 2, L = ``DEEP_L`` (the largest L the engine chooses), drafts seeded
    ``DEEP_SEED``.

    Raises:
        ValueError: unknown rule.
    """
    K = 1 if registry.is_single_draft(rule) else 2
    return fixed_case(f"{rule} deep V=3 K={K} L={DEEP_L} {backend_dtype}", rule, *toy_models(3, DEEP_SEED), K,
                      DEEP_L, DEEP_SEED, backend_dtype=backend_dtype)


def distinctive_case(rule: str, backend_dtype: str = "float32") -> FixedCase:
    """The toy distinctive case of a rule with ``distinctive_seeds`` (the project's plan runs it,
    certify/suite.py ``distinctive_cases``): toy_models(3, 12), K = L = 3, drafts
    seeded by the spec's toy seed, on which the rule's law is at TV ≥ 0.05 from the other
    multi-draft rules (a port of the wrong rule fails it).

    Raises:
        FamilyNotApplicable: the rule has no ``distinctive_seeds``.
    """
    seeds = registry.spec(rule).distinctive_seeds
    if seeds is None:
        raise FamilyNotApplicable(f"family 'distinctive': rule {rule!r} has no distinctive_seeds (RuleSpec)")
    return fixed_case(f"{rule} distinctive V=3 K=3 L=3 {backend_dtype}", rule, *toy_models(3, 12), 3, 3, seeds[0],
                      backend_dtype=backend_dtype)


def case_family(family: str, rule: str, K: int, L: int, dtype: str = "float64", seed: int = 0) -> FixedCase:
    """One built-in fixed case of ``family`` for a verifier expected to follow ``rule``'s law.

    Families (toy, prefix, large, zeros, disjoint, equal at the caller's K and L; vocab at the
    caller's K and L = 1; the last five at their own pinned shapes, the same for every caller,
    named in the case):
      * "toy": V = 3 prefix-dependent toy models, draft close to target;
      * "prefix": V = 5, rows depending on the whole prefix, draft far from target;
      * "large": V = 4,096 peaked rows (a correction or bonus truncated to the top k tokens
        moves this law);
      * "vocab": V = 151,936 (Qwen2.5's vocabulary), rows of a real model's shape whose likely
        tokens have ids ≥ 65,536 (``HighIdRows``), blocks of one token (``vocab_case``); rules
        whose registry spec has ``bench`` False (a host plan too slow at a real vocabulary) are
        skipped;
      * "zeros": toy rows, V = max(3, K + 1), target probability 0 on the tokens drafted at
        the last depth and on other drafts' first tokens (``_zero_target_mass``);
      * "disjoint": V = 8, target rows nearly disjoint from the draft's;
      * "equal": p = q (every draft token must be accepted by a lossless single-path rule);
      * "coverage": the rule's branch-coverage case (``coverage_case``: the project's own plan
        runs it; every outcome class of oracle.branches ≥ 0.02);
      * "distinctive": the rule's toy distinctive case (``distinctive_case``; rules with
        ``distinctive_seeds`` only);
      * "onehot": the coverage case (the "toy" case for a rule without one) with one-hot draft
        rows (``one_hot_draft_case``: n-gram, prompt-lookup and greedy drafters);
      * "branches": K = 2 drafts sharing their first token (``branches_case``), multi-draft
        rules only;
      * "deep": L = ``DEEP_L`` = 8 at V = 3 (``deep_case``).

    Args:
        family: one of ``FAMILIES``.  rule: registered rule name whose exact law is expected.
        K, L: drafts and block length (K = 1 for a single-draft rule).  dtype: "float64",
        "float32" or "bfloat16" (the rows are rounded to it, the law is that of the rounded rows).
        seed: seeds the models and the drafts of toy, prefix, large, zeros, disjoint and equal (the
            others are pinned).
    Returns:
        FixedCase named "<rule> <family> V=… K=… L=…".
    Raises:
        ValueError: unknown family or rule, K or L < 1, K ≠ 1 for a single-draft rule.
        FamilyNotApplicable (a ValueError): "coverage" for a rule without ``coverage_seeds``,
            "distinctive" for one without ``distinctive_seeds``, "branches" for a single-draft
            rule or one without a pinned case, "vocab" for a rule too slow at a real vocabulary.
    """
    registry.spec(rule)
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    for name, v in (("K", K), ("L", L)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if registry.is_single_draft(rule) and K != 1:
        raise ValueError(f"rule {rule!r} is single-draft: K must be 1, got {K}")
    if family == "coverage":
        if registry.spec(rule).coverage_seeds is None:
            raise FamilyNotApplicable(f"family 'coverage': rule {rule!r} has no coverage_seeds (RuleSpec)")
        return coverage_case(rule, dtype)
    if family == "onehot":
        base = (coverage_case(rule, dtype) if registry.spec(rule).coverage_seeds is not None
                else case_family("toy", rule, K, L, dtype, seed))
        one_hot = one_hot_draft_case(base)
        one_hot.name = one_hot.name.replace(" coverage ", " onehot ", 1).replace(" toy ", " onehot ", 1)
        return one_hot
    if family == "branches":
        return branches_case(rule, dtype)
    if family == "distinctive":
        return distinctive_case(rule, dtype)
    if family == "deep":
        return deep_case(rule, dtype)
    if family == "vocab":
        if not registry.spec(rule).bench:
            raise FamilyNotApplicable(f"family 'vocab': rule {rule!r} is too slow at a real vocabulary "
                                      "(RuleSpec.bench False: its host plan)")
        return vocab_case(rule, K, dtype)
    if family == "toy":
        draft, target = toy_models(3, 100 + seed)
    elif family == "zeros":  # a vocabulary the K drafts cannot cover
        draft, target = toy_models(max(3, K + 1), 100 + seed)
    elif family == "prefix":
        draft, target = RandomModel(5, 200 + seed, 0.5), RandomModel(5, 300 + seed, 0.5)
    elif family == "large":
        draft, target = large_models(4096, 21 + seed)
    elif family == "disjoint":
        draft, target = toy_models(8, 400 + seed)
    else:  # equal
        target = RandomModel(4, 500 + seed, 1.0)
        draft = target
    V = target.vocab_size
    case = fixed_case(f"{rule} {family} V={V} K={K} L={L}", rule, draft, target, K, L, seed,
                      backend_dtype=dtype)
    if family == "zeros":
        case = _zero_target_mass(case)
    elif family == "disjoint":
        case = _near_disjoint(case)
    return case
