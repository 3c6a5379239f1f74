"""The seed contract, checked: replay, seed dependence and batch independence of a verifier
under certification.

reference/contract.py: row b's randomness comes from seeds[b] alone, so the same seeds give
the same outputs (a run can be replayed), distinct seeds give independent draws, and a row's
output does not depend on the other rows of its batch, on its position or on the batch size.  A
law test cannot see a breach: a verifier that draws from a global RNG, that reseeds one fixed
stream, or that draws every row from one generator seeded by seeds[0] has the right law of
outcomes and passes every G-test.  Every certification (``oracle.certify.certify``, hence
``oracle.harness.certify_verifier`` and the pytest plugin's ``assert_lossless``;
``oracle.lossless.certify_lossless``; a function of vLLM's layout through
``gpu_backend.adapters.vllm_adapter.from_vllm_layout``, which is such a verifier) therefore runs
three deterministic checks on one batch of B rows (the idea of the vLLM samplers' replay check,
certify/samplers/vllm.py ``replay_checks``, on the harness's own rows and seeds):

1. "seed replay": the batch twice with the same seeds S (hashed 63-bit seeds,
   oracle/seeding.py).  Every row's outcome (τ, and the τ + 1 emitted tokens) must be
   identical; else FAIL, "not reproducible from its seeds".  A verifier that keeps the contract
   never fails it.
2. "seed dependence": the batch with fresh seeds S'.  Some row's outcome must differ; else
   FAIL, "ignores its seeds".  A verifier that keeps the contract has each row's outcome
   coincide under S and S' with probability c = Σ_o P(o)² (the collision probability of the
   case's exact law, ``collision_probability``), all B rows with probability c^B; B is the
   smallest batch ≥ ``REPLAY_ROWS`` (256) with c^B < ``FALSE_ALARM`` (10^-12), at most
   ``MAX_CHECK_ROWS`` (4,096), on the expected-pass fixed case of smallest V that allows it.
   Where no law is known (``certify_lossless``: a verifier with no reference rule; fresh-draft
   cases) B = ``UNKNOWN_LAW_ROWS`` (1,024): a verifier whose per-row coincidence is c fails with
   probability c^1024 (< 10^-12 for c < 0.973).  Where every case's law is near-deterministic
   (c^4096 ≥ 10^-12) identical outputs are no evidence and only the second clause below applies.
   The check also fails when the replay with the same seeds changed about as many rows as the
   fresh seeds did (at least half as many, and at least one): the outputs do not depend on the
   seeds, as with a global RNG; a verifier that keeps the contract changes none under replay.
3. "batch independence": rows of the batch re-run with their own seeds S, each alone
   (``ALONE_ROWS`` = 4 calls of one row: rows B − 1, ⌊B/2⌋, ⌊B/3⌋ and 1) and all together
   inside a permuted batch of another size (the B rows in a random order with
   ⌈B/8⌉ more rows — copies of batch rows with fresh seeds — interleaved, B + ⌈B/8⌉ rows in
   one call; the order and the extra rows are a function of S, so the check replays).  Every
   re-run row's outcome must equal its outcome in the first call; else FAIL, "depends on its
   batch".  A verifier that keeps the contract never fails it (its outputs are a function of
   each row's inputs and seed; a rounding difference between batch shapes could move one only
   if a coin or a race fell within an ulp of its threshold).  A verifier whose row b depends on
   its neighbours, its position or the batch size — one generator seeded by seeds[0] for the
   whole batch, row b reading seeds[b + 1] — changes each re-run row unless its two outcomes
   coincide, so all B + 4 coincide with probability ≤ c^B < 10^-12 on the case chosen above.

A verifier that ignores its seeds and draws from a global RNG fails all three checks; one that
reseeds a fixed stream on every call fails "seed dependence" (and "batch independence" when its
streams follow the row index); one that uses its seeds but mixes in other randomness on some
rows fails "seed replay" only; one that draws the whole batch from one generator seeded by
seeds[0] fails "batch independence" only.

A verifier that raises, or returns outputs that break the contract (``_outcomes``), on a check's
batch fails the checks that needed that call, with the error as their detail: a detected
defect is a verdict, never an exception.
"""

from __future__ import annotations

import math

import numpy as np

from spectr_gbv.oracle.contract_check import SEED_CONTRACT_NAMES, SeedCheck
from spectr_gbv.reference.contract import ContractViolation, to_numpy
from spectr_gbv.oracle.seeding import CaseSeeds

__all__ = ["SeedCheck", "SEED_CHECK_NAMES", "REPLAY_ROWS", "MAX_CHECK_ROWS", "UNKNOWN_LAW_ROWS", "FALSE_ALARM",
           "ALONE_ROWS", "collision_probability", "rows_needed", "check_seed_contract", "call_outcomes",
           "lossless_seed_checks", "seed_table", "SEED_CONTRACT_NAMES", "BATCH_CHECK_NAMES", "NARROWINGS",
           "NARROWING_NAMES", "NARROWING_ROWS", "narrowed", "narrowing_seeds", "check_seed_narrowing",
           "check_single_request_path", "check_batch_contract", "mixing_rows"]

SEED_CHECK_NAMES = ("seed replay", "seed dependence", "batch independence")
ALONE_ROWS = 4
REPLAY_ROWS = 256
MAX_CHECK_ROWS = 4096
UNKNOWN_LAW_ROWS = 1024
# the check batch of certify_lossless when it has only pairs of a real vocabulary (``lossless_seed_checks``):
# c^64 < 10^-12 for a per-row coincidence c < 0.65
LARGE_CHECK_ROWS = 64
# the most probabilities one call of the checks hands over: oracle.certify.CALL_PROBABILITIES (2^27, 1 GiB
# of float64; this module sits below oracle.certify, tests/oracle/test_seed_narrowing.py asserts the two agree)
CALL_PROBABILITIES = 2**27
FALSE_ALARM = 1e-12


def collision_probability(law: dict) -> float:
    """Σ_o P(o)²: the probability that two independent draws from ``law`` (outcome →
    probability) coincide."""
    return float(sum(p * p for p in law.values()))


def rows_needed(collision: float, false_alarm: float = FALSE_ALARM, at_least: int = REPLAY_ROWS,
                at_most: int = MAX_CHECK_ROWS) -> int | None:
    """The smallest B ≥ ``at_least`` with collision^B < ``false_alarm``, or None when it exceeds
    ``at_most`` (or collision ≥ 1).

    Raises:
        ValueError: collision outside [0, 1] (beyond float rounding), false_alarm outside (0, 1).
    """
    if not -1e-12 <= collision <= 1 + 1e-12:
        raise ValueError(f"collision must lie in [0, 1], got {collision!r}")
    if not 0.0 < false_alarm < 1.0:
        raise ValueError(f"false_alarm must lie in (0, 1), got {false_alarm!r}")
    if collision <= 0.0:
        return at_least
    if collision >= 1.0:
        return None
    B = max(at_least, math.floor(math.log(false_alarm) / math.log(collision)) + 1)
    return B if B <= at_most else None


def _outcomes(out, B: int) -> tuple[np.ndarray, np.ndarray]:
    """(τ int64 [B], tokens int64 [B, L+1] with the positions past τ set to -1) of one call.

    Raises:
        ContractViolation: no τ/tokens, or shapes other than [B] and [B, L+1].
    """
    try:
        tau = np.asarray(to_numpy(out.tau)).astype(np.int64, casting="unsafe").reshape(-1)
        tokens = np.asarray(to_numpy(out.tokens)).astype(np.int64, casting="unsafe")
    except AttributeError as err:
        raise ContractViolation(f"verifier output has no tau/tokens (the batched contract's BatchVerdict): "
                                f"{err}") from None
    if tau.shape != (B,) or tokens.ndim != 2 or tokens.shape[0] != B:
        raise ContractViolation(f"verifier returned tau of shape {tau.shape} and tokens of shape {tokens.shape}, "
                                f"expected [{B}] and [{B}, L+1]")
    keep = np.arange(tokens.shape[1])[None, :] <= np.clip(tau, 0, tokens.shape[1] - 1)[:, None]
    return tau, np.where(keep, tokens, -1)


def call_outcomes(verifier, rows, seeds: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray] | None, str]:
    """One call of ``verifier`` on ``rows`` (draft_tokens, draft_probs, target_probs) with
    ``seeds`` int64 [B]: ((τ [B], tokens [B, L+1], −1 past τ), "") — or (None, what went wrong)
    when the verifier raised or broke the contract's output shapes (the error's type and
    message: a verdict's reason, never re-raised)."""
    try:
        return _outcomes(verifier(*rows, seeds=np.array(seeds, dtype=np.int64)), len(seeds)), ""
    except Exception as err:  # a defect of the verifier under certification: its reason
        return None, f"{type(err).__name__}: {err}"


def _changed(a, b) -> int:
    return int(((a[0] != b[0]) | (a[1] != b[1]).any(axis=1)).sum())


def _differs(a, b) -> np.ndarray:
    return (a[0] != b[0]) | (a[1] != b[1]).any(axis=1)


def _take(rows, index: np.ndarray) -> tuple:
    return tuple(np.asarray(a)[index] for a in rows)


def _calls(verifier, rows, seeds: np.ndarray, max_rows: int | None = None, index: np.ndarray | None = None):
    """``call_outcomes`` on rows ``index`` of ``rows`` (all rows when None), in calls of at most
    ``max_rows`` rows (one call when None), each call's rows gathered when it is made (a batch of a
    real vocabulary is not copied whole); the outcomes concatenated, or (None, the error)."""
    n = len(seeds)
    if index is None:
        index = np.arange(len(rows[0]))
    if max_rows is None or n <= max_rows:
        rows_in = rows if index.size == len(rows[0]) and (index == np.arange(index.size)).all() else _take(rows, index)
        return call_outcomes(verifier, rows_in, seeds)
    taus, tokens = [], []
    for a in range(0, n, max_rows):
        out, err = call_outcomes(verifier, _take(rows, index[a:a + max_rows]), seeds[a:a + max_rows])
        if out is None:
            return None, err
        taus.append(out[0])
        tokens.append(out[1])
    return (np.concatenate(taus), np.concatenate(tokens)), ""


def _independence_check(changed: np.ndarray, first, subject: str, what: str) -> SeedCheck:
    """The "batch independence" SeedCheck from ``changed`` (bool [B]: rows whose re-run outputs
    differ from ``first``'s (τ [B], tokens [B, L+1])) and ``what`` (the re-runs, in words)."""
    B = len(changed)
    n = int(changed.sum())
    if n == 0:
        return SeedCheck("batch independence", True, subject, B, 0, 0.0, f"{what}: identical outputs")
    b = int(np.flatnonzero(changed)[0])
    return SeedCheck("batch independence", False, subject, B, n, 0.0,
                     f"depends on its batch: {what} gave different outputs in {n} rows (first: row {b}, τ = "
                     f"{int(first[0][b])} in the first call); row b's output must depend on its inputs and "
                     "seeds[b] alone, not on its neighbours, its position or the batch size (reference/contract.py)")


def _batch_independence(verifier, rows, seeds: np.ndarray, fresh_seeds: np.ndarray, first, subject: str
                        ) -> SeedCheck:
    """The third check of the module doc on a batch whose first call gave ``first``."""
    B = len(seeds)
    alone = sorted({B - 1, B // 2, B // 3, min(1, B - 1)})[:ALONE_ROWS]
    # the permuted batch of another size: a function of the seeds, so the check replays
    rng = np.random.default_rng(np.random.SeedSequence([0xB47C, *(int(s) % 2**64 for s in seeds[:4])]))
    extra = max(1, -(-B // 8))
    source = np.concatenate([rng.permutation(B), B + rng.integers(0, B, extra)])  # ≥ B: an extra row
    order = rng.permutation(source.size)
    source = source[order]
    index = np.where(source < B, source, source - B)
    batch_seeds = np.where(source < B, seeds[index], fresh_seeds[index])
    what = (f"rows {', '.join(map(str, alone))} re-run alone and the {B} rows inside a permuted batch of "
            f"{B + extra} (their own seeds; {extra} extra rows with fresh seeds)")
    changed = np.zeros(B, dtype=bool)
    for b in alone:
        out, err = call_outcomes(verifier, _take(rows, np.array([b])), seeds[b:b + 1])
        if out is None:
            return SeedCheck("batch independence", False, subject, B, 0, 0.0,
                             f"the verifier raised on row {b} alone: {err}")
        changed[b] |= bool(_differs(out, (first[0][b:b + 1], first[1][b:b + 1]))[0])
    out, err = call_outcomes(verifier, _take(rows, index), batch_seeds)
    if out is None:
        return SeedCheck("batch independence", False, subject, B, 0, 0.0,
                         f"the verifier raised on the permuted batch of {B + extra} rows: {err}")
    mine = source < B
    diff = _differs((out[0][mine], out[1][mine]), (first[0][index[mine]], first[1][index[mine]]))
    changed[index[mine][diff]] = True
    return _independence_check(changed, first, subject, what)


def _check_seed_args(draft_tokens, draft_probs, target_probs, seeds, fresh_seeds):
    """(seeds, fresh_seeds as int64 [B], the rows) or ValueError naming the seeds."""
    seeds, fresh_seeds = np.asarray(seeds, dtype=np.int64), np.asarray(fresh_seeds, dtype=np.int64)
    B = len(draft_tokens)
    if seeds.shape != (B,) or fresh_seeds.shape != (B,):
        raise ValueError(f"seeds and fresh_seeds must have shape [{B}], got {seeds.shape} and {fresh_seeds.shape}")
    return seeds, fresh_seeds, (draft_tokens, draft_probs, target_probs)


def _coincidence(collision) -> tuple[float, str]:
    """(the probability that all rows coincide, the per-row coincidence as printed) for a scalar
    per-row coincidence c (c^B is taken by the caller) or per-row values [B] (their product;
    printed as their geometric mean)."""
    c = np.asarray(collision, dtype=np.float64)
    if c.ndim == 0:
        return float(c), f"{float(c):.4g}"
    with np.errstate(divide="ignore"):
        log_all = float(np.log(c).sum())
    return math.exp(log_all), f"{math.exp(log_all / max(1, c.size)):.4g} (geometric mean over the rows)"


def _replay_and_dependence(verifier, rows, seeds, fresh_seeds, collision, subject: str, max_rows=None):
    """(first call's outcomes or None, the "seed replay" and "seed dependence" SeedChecks) of the
    module doc on one batch; ``collision``: None, a per-row c, or per-row values [B]; calls of at
    most ``max_rows`` rows (``_calls``)."""
    B = len(seeds)
    first, err = _calls(verifier, rows, seeds, max_rows)
    if first is None:
        why = f"the verifier raised on the check's batch of {B} rows: {err}"
        return None, SeedCheck("seed replay", False, subject, B, 0, 0.0, why), \
            SeedCheck("seed dependence", False, subject, B, 0, 0.0, why)
    again, err_again = _calls(verifier, rows, seeds, max_rows)
    fresh, err_fresh = _calls(verifier, rows, fresh_seeds, max_rows)
    if again is None:
        replay = SeedCheck("seed replay", False, subject, B, 0, 0.0,
                           f"the verifier raised on the replay of its batch of {B} rows: {err_again}")
        same_changed = 0
    else:
        same_changed = _changed(first, again)
        replay_ok = same_changed == 0
        replay = SeedCheck(
            "seed replay", replay_ok, subject, B, same_changed, 0.0,
            f"the same {B} rows with the same seeds, twice: identical outputs" if replay_ok else
            f"not reproducible from its seeds: the same {B} rows with the same seeds, twice, gave different "
            f"outputs in {same_changed} rows (row b's randomness must come from seeds[b] alone: reference/contract.py)")

    if collision is None:
        false_alarm, c_text = math.nan, ""
    else:
        c_all, c_text = _coincidence(collision)
        false_alarm = c_all ** B if np.ndim(collision) == 0 else c_all
    enforce = collision is None or false_alarm < FALSE_ALARM
    if fresh is None:
        dependence = SeedCheck("seed dependence", False, subject, B, 0, 0.0,
                               f"the verifier raised on its batch of {B} rows with fresh seeds: {err_fresh}")
    else:
        fresh_changed = _changed(first, fresh)
        like_fresh = same_changed > 0 and 2 * same_changed >= fresh_changed
        if like_fresh:
            dep_ok, why = False, (
                f"ignores its seeds: the same seeds changed the outputs of {same_changed} of {B} rows, as many as "
                f"fresh seeds did ({fresh_changed}): its outputs do not depend on the seeds (a global or shared RNG?)")
        elif fresh_changed == 0 and enforce:
            chance = ("a verifier that keeps the contract does so with probability "
                      + (f"{false_alarm:.2g} (per-row coincidence {c_text}, the case's exact law)"
                         if collision is not None else "c^B, c its per-row coincidence (not computed here)"))
            dep_ok, why = False, (f"ignores its seeds: the same {B} rows with fresh seeds gave identical outputs in "
                                  f"every row ({chance})")
        else:
            dep_ok = True
            why = f"fresh seeds changed the outputs of {fresh_changed} of {B} rows"
            if collision is not None:
                why += (f" (per-row coincidence {c_text} from the case's exact law; all {B} coincide w.p. "
                        f"{false_alarm:.2g})")
            if not enforce:
                why += ("; identical outputs would not count: the law is near-deterministic on every case, "
                        "only replay-as-fresh is checked")
        dependence = SeedCheck("seed dependence", dep_ok, subject, B, fresh_changed,
                               false_alarm if enforce else 0.0, why)
    return first, replay, dependence


def check_seed_contract(verifier, draft_tokens, draft_probs, target_probs, seeds, fresh_seeds, *,
                        collision: float | None = None, subject: str = "") -> tuple[SeedCheck, SeedCheck, SeedCheck]:
    """Run the three checks of the module doc on one batch.

    Args:
        verifier: an object with the batched contract (reference/contract.py).
        draft_tokens int64 [B, K, L], draft_probs [B, K, L, V], target_probs [B, K, L+1, V]: the
            rows (numpy, as the certification hands them).
        seeds, fresh_seeds: int64 [B], two unrelated sets (``CaseSeeds.check_seeds``).
        collision: the per-row coincidence probability c of a verifier keeping the contract on
            these rows, or None where unknown (module doc).
        subject: what the rows are, for the report.
    Returns:
        (the "seed replay", "seed dependence" and "batch independence" SeedChecks).  A verifier
        that raises or returns malformed outputs fails the checks that needed the call, the
        error in their detail (module doc).
    Raises:
        ValueError: seeds of the wrong shape (the caller's arguments).
    """
    seeds, fresh_seeds, rows = _check_seed_args(draft_tokens, draft_probs, target_probs, seeds, fresh_seeds)
    first, replay, dependence = _replay_and_dependence(verifier, rows, seeds, fresh_seeds, collision, subject)
    if first is None:
        return replay, dependence, SeedCheck("batch independence", False, subject, len(seeds), 0, 0.0, replay.detail)
    return replay, dependence, _batch_independence(verifier, rows, seeds, fresh_seeds, first, subject)



# -- the batched contract's checks of the public doors (issue 57): the five checks above on a
# batch of rows of several requests, each row re-run alone, and seeds that collide under the
# usual narrowings ----------------------------------------------------------------------------

BATCH_CHECK_NAMES = ("seed replay", "seed dependence", "seed narrowing", "batch independence", "single-request path")

# The narrowings "seed narrowing" tells apart: name, the bits or the float kept, what does it.  Pairs
# of seeds equal under one narrowing (and under the coarser ones that contain it: a pair equal mod 2^32
# is equal mod 2^31 and mod 2^16; a pair equal as float64 is equal as float32) and distinct under the
# others (``narrowing_seeds``).
NARROWINGS = (
    ("mod 2^16", 16, "the low 16 bits (a uint16 or int16 seed field, seed % 65,536)"),
    ("mod 2^31", 31, "the low 31 bits (seed % 2^31, seed & 0x7FFFFFFF, a non-negative int32)"),
    ("mod 2^32", 32, "the low 32 bits (an int32 or uint32 cast, a 32-bit generator seeded with the seed itself)"),
    ("float32 round trip", "float32", "24 bits of mantissa (the seed passed through float32)"),
    ("float64 round trip", "float64", "53 bits of mantissa (the seed passed through a float64: float(seed), JSON)"),
)
NARROWING_NAMES = tuple(n for n, _, _ in NARROWINGS)
# Rows of the narrowing check: each row is sent 2 + len(NARROWINGS) times (its base seed, one partner per
# narrowing, an unrelated control seed), all in one call.
NARROWING_ROWS = 256
# Streams of oracle.seeding.CaseSeeds.node used here (beyond seeding.py's 0-4).
NARROWING_STREAM, SHIFT_STREAM = 16, 17


def narrowed(name: str, seeds) -> list:
    """The values of ``seeds`` (ints in [0, 2^63)) under the narrowing ``name`` of
    ``NARROWINGS``: ints mod 2^k, or the float32 / float64 they round to.

    Raises:
        ValueError: unknown name.
    """
    kept = {n: k for n, k, _ in NARROWINGS}
    if name not in kept:
        raise ValueError(f"unknown narrowing {name!r}; known: {', '.join(NARROWING_NAMES)}")
    k = kept[name]
    values = np.asarray(seeds, dtype=np.int64)
    if k == "float32":
        return [float(x) for x in values.astype(np.float32)]
    if k == "float64":
        return [float(int(x)) for x in values]
    return [int(x) % 2**k for x in values]


def narrowing_seeds(rng: np.random.Generator, n: int) -> tuple[np.ndarray, dict, np.ndarray]:
    """(base int64 [n], {narrowing name: partner int64 [n]}, control int64 [n]), all in [0, 2^63).

    Row j's base seed is v + a, v a multiple of 2^37 in (2^60, 2^61) (exact in float32 and
    float64), a odd in [1, 63]; its partners: v − b (b even in [2, 62]: the same float64, and so
    the same float32), v − b' (b' even in [2^20, 2^35]: the same float32, another float64) and
    base + o·2^k (o odd, o·2^k in [2^44, 2^48): equal mod 2^k, not mod 2^(k+1), another float32).
    Every partner differs from its base under each narrowing that does not contain its own (the
    nesting of ``NARROWINGS``); the control is an unrelated seed.  ``tests/oracle/
    test_seed_narrowing.py`` checks these properties on the pairs themselves.

    Raises:
        ValueError: n < 1.
    """
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    v = rng.integers(2**23 + 1, 2**24 - 1, size=n).astype(np.int64) << 37
    a = 2 * rng.integers(0, 32, size=n).astype(np.int64) + 1
    base = v + a
    partners = {}
    for name, k, _ in NARROWINGS:
        if k == "float64":
            partners[name] = v - 2 * rng.integers(1, 32, size=n).astype(np.int64)
        elif k == "float32":
            partners[name] = v - 2 * rng.integers(2**19, 2**34, size=n).astype(np.int64)
        else:
            low, high = 2 ** (44 - k), 2 ** (48 - k)
            odd = 2 * rng.integers(low // 2, high // 2, size=n).astype(np.int64) + 1
            partners[name] = base + (odd << k)
    control = rng.integers(0, 2**63 - 1, size=n, dtype=np.int64)
    return base, partners, control


def _narrowing_name(failed: list[str]) -> str:
    """The narrowing a set of failed pair families points to: the fewest bits kept."""
    mods = [k for n, k, _ in NARROWINGS if n in failed and isinstance(k, int)]
    names = [f"mod 2^{min(mods)}"] if mods else []
    if "float32 round trip" in failed:
        names.append("float32 round trip")
    elif "float64 round trip" in failed:
        names.append("float64 round trip")
    return " and ".join(names)


def check_seed_narrowing(verifier, rows, rng: np.random.Generator, subject: str = "",
                         max_rows: int | None = None) -> SeedCheck:
    """The "seed narrowing" check (reference/contract.py: a verifier uses all the bits of its seed).

    Each of the n rows of ``rows`` (draft_tokens [n, K, L], draft_probs, target_probs) is sent
    with its base seed, with one partner per narrowing of ``NARROWINGS`` (a seed equal to the base
    under that narrowing only, ``narrowing_seeds``) and with an unrelated control seed, all
    (2 + 5)·n rows in one call in a drawn order (in calls of at most ``max_rows`` rows when given).
    For each narrowing, x_j = 1 where row j's partner
    gave the base's outcome (τ and tokens), y_j = 1 where the control did.  A verifier that keeps
    the contract draws partner and control independently of the base, so (x_j, y_j) is
    exchangeable: among the rows where they differ, x_j = 1 is a fair coin whatever the law.  The
    sign test (D = #{x = 1, y = 0} of the m = D + #{x = 0, y = 1} rows; p = P(Binomial(m, ½) ≥ D))
    fails a narrowing at p ≤ ``FALSE_ALARM`` / 5: the check's false alarm is ≤ ``FALSE_ALARM``
    (10^-12) on any rows, no law needed.  A verifier that narrows its seeds gives every partner of
    that narrowing (and of the finer ones it contains) the base's outcome, x_j = 1 for all j: it
    fails with p = 2^-m, m the rows where the control's outcome differs (m ≈ (1 − c)·n, c the
    per-row coincidence; m ≥ 43 suffices).  The failure names the narrowing: the fewest bits kept
    (mod 2^16 when the mod 2^16, 2^31 and 2^32 pairs coincide) and the float.

    Args:
        verifier: an object with the batched contract.  rows: the n rows (numpy).
        rng: the Generator of the pairs and the order.  subject: what the rows are.
    Returns:
        SeedCheck "seed narrowing": ``changed`` the partners that coincided with their base in the
        worst narrowing, ``false_alarm`` ``FALSE_ALARM``; a verifier that raises fails it.
    """
    n = len(rows[0])
    base, partners, control = narrowing_seeds(rng, n)
    groups = [base, *partners.values(), control]
    seeds = np.concatenate(groups)
    index = np.tile(np.arange(n), len(groups))
    order = rng.permutation(len(index))
    out, err = _calls(verifier, rows, seeds[order], max_rows, index[order])
    if out is None:
        return SeedCheck("seed narrowing", False, subject, n, 0, FALSE_ALARM,
                         f"the verifier raised on the batch of {len(index)} rows of seed pairs: {err}")
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    tau, tokens = out[0][back].reshape(len(groups), n), out[1][back].reshape(len(groups), n, -1)

    def same(g: int) -> np.ndarray:
        return (tau[g] == tau[0]) & (tokens[g] == tokens[0]).all(axis=1)

    from scipy.stats import binom

    y = same(len(groups) - 1)
    level = FALSE_ALARM / len(NARROWINGS)
    failed, worst, lines = [], 0, []
    for g, name in enumerate(partners, start=1):
        x = same(g)
        d, e = int((x & ~y).sum()), int((~x & y).sum())
        p = float(binom.sf(d - 1, d + e, 0.5)) if d + e else 1.0
        if p <= level:
            failed.append(name)
        worst = max(worst, int(x.sum()))
        lines.append(f"{name}: {int(x.sum())}/{n} (p = {p:.2g})")
    summary = (f"{n} rows, each with a partner seed equal under one narrowing and an unrelated seed; outputs equal "
               f"to the base seed's: unrelated {int(y.sum())}/{n}, " + ", ".join(lines)
               + f"; sign test per narrowing at {level:.1g}")
    if not failed:
        return SeedCheck("seed narrowing", True, subject, n, worst, FALSE_ALARM, summary)
    name = _narrowing_name(failed)
    what = "; ".join(w for nm, _, w in NARROWINGS if nm in name.split(" and "))
    return SeedCheck("seed narrowing", False, subject, n, worst, FALSE_ALARM,
                     f"narrows its seeds ({name}): seeds equal under {name} give the same outputs, unrelated seeds "
                     f"do not — it keeps {what} (reference/contract.py: a verifier uses all the bits of its seed). "
                     + summary)


def check_single_request_path(verifier, rows, seeds, first, subject: str = "", collision=None,
                              max_rows: int | None = None) -> SeedCheck:
    """The "single-request path" check: every row of the batch re-run alone (B calls of one row)
    with its own seed must give the outcome it had in the batch (``first``: (τ, tokens) of the
    batched call).  Deterministic: a verifier that keeps the contract never fails it.  A verifier
    whose batch of one takes another path that draws differently fails unless every row's two
    outcomes coincide (probability Π c_j, the product of the rows' per-row coincidences:
    ``collision``, for the detail).  ``max_rows``: re-run only the first ``max_rows`` rows (a batch
    of a real vocabulary: each row alone is a call of K·(2L + 1)·V probabilities)."""
    B = len(seeds) if max_rows is None else min(len(seeds), int(max_rows))
    if collision is not None and np.ndim(collision):
        collision = np.asarray(collision)[:B]
    changed = []
    for b in range(B):
        out, err = call_outcomes(verifier, _take(rows, np.array([b])), seeds[b:b + 1])
        if out is None:
            return SeedCheck("single-request path", False, subject, B, len(changed), 0.0,
                             f"the verifier raised on row {b} alone: {err}")
        if _differs(out, (first[0][b:b + 1], first[1][b:b + 1]))[0]:
            changed.append(b)
    chance = ""
    if collision is not None:
        c_all, _ = _coincidence(collision)
        chance = f" (a second path drawing independently passes with probability {c_all if np.ndim(collision) else c_all ** B:.2g})"
    if not changed:
        return SeedCheck("single-request path", True, subject, B, 0, 0.0,
                         f"each of the {B} rows re-run alone, with its own seed: the outputs it had in the batch{chance}")
    b = changed[0]
    return SeedCheck("single-request path", False, subject, B, len(changed), 0.0,
                     f"a row alone differs from the same row in a batch: {len(changed)} of the {B} rows re-run alone "
                     f"(one call of one row each, own seed) gave other outputs (first: row {b}, τ = "
                     f"{int(first[0][b])} in the batch); a batch of one must follow the batched path's draws "
                     "(reference/contract.py: row b's verdict is a function of its rows and seeds[b])")


def _batch_independence_shifted(verifier, rows, seeds, fresh_seeds, first, subject: str, rng,
                                max_rows: int | None = None) -> SeedCheck:
    """"batch independence" on a batch of rows of several requests: the B rows (1) in a drawn order
    with ⌈B/8⌉ extra rows (copies of batch rows with fresh seeds) interleaved, and (2) in their own
    order after one extra leading row (every row one position later, so every chunk of a fixed
    tile ends one row earlier in the batch's rows), each one call; every row's outcome must equal
    its outcome in the first call."""
    B = len(seeds)
    extra = max(1, -(-B // 8))
    source = np.concatenate([rng.permutation(B), B + rng.integers(0, B, extra)])
    source = source[rng.permutation(source.size)]
    lead = int(rng.integers(0, B))
    shifted = np.concatenate([[B + lead], np.arange(B)])
    changed = np.zeros(B, dtype=bool)
    calls = []
    for src in (source, shifted):
        index = np.where(src < B, src, src - B)
        batch_seeds = np.where(src < B, seeds[index], fresh_seeds[index])
        out, err = _calls(verifier, rows, batch_seeds, max_rows, index)
        if out is None:
            return SeedCheck("batch independence", False, subject, B, 0, 0.0,
                             f"the verifier raised on a batch of {src.size} rows of the check: {err}")
        mine = src < B
        diff = _differs((out[0][mine], out[1][mine]), (first[0][index[mine]], first[1][index[mine]]))
        changed[index[mine][diff]] = True
        calls.append(src.size)
    what = (f"the {B} rows re-run in a drawn order inside a batch of {calls[0]} ({extra} extra rows with fresh "
            f"seeds) and one position later inside a batch of {calls[1]}")
    return _independence_check(changed, first, subject, what)


def check_batch_contract(verifier, draft_tokens, draft_probs, target_probs, seeds, fresh_seeds, rng, *,
                         collision=None, subject: str = "", max_rows: int | None = None) -> tuple[SeedCheck, ...]:
    """The five checks of ``BATCH_CHECK_NAMES`` on one batch (the public doors' seed and batch
    checks: ``oracle.harness.certify_verifier`` on a batch of rows of several cases,
    ``certify_lossless`` on its first call's rows).

    1-2. "seed replay", "seed dependence": as ``check_seed_contract`` (module doc);
    3. "seed narrowing": ``check_seed_narrowing`` on the batch's rows (at most
       ``NARROWING_ROWS``);
    4. "batch independence": the rows re-run in a drawn order inside a batch of B + ⌈B/8⌉ rows,
       and one position later after an extra leading row (``_batch_independence_shifted``);
    5. "single-request path": every row re-run alone (``check_single_request_path``).

    Args:
        verifier: an object with the batched contract.  draft_tokens int64 [B, K, L], draft_probs
            [B, K, L, V], target_probs [B, K, L+1, V]: the rows (rows of several requests, in an
            order where neighbours differ, as the doors build them).
        seeds, fresh_seeds: int64 [B], two unrelated sets.
        rng: numpy Generator of the checks' own draws (orders, extra rows, seed pairs).
        collision: None (unknown), a per-row coincidence c, or per-row values [B] (for the
            dependence check's rule and the details).
        subject: what the rows are.
        max_rows: None (each batch in one call), or the most rows per call (rows of a real
            vocabulary: the batches go in calls of at most ``max_rows`` rows, each gathered when it
            is made, and "single-request path" re-runs the first ``max_rows`` rows alone).
    Returns:
        the five SeedChecks, in ``BATCH_CHECK_NAMES`` order; a verifier that raises fails the checks
        that needed the call.
    Raises:
        ValueError: seeds of the wrong shape (the caller's arguments).
    """
    seeds, fresh_seeds, rows = _check_seed_args(draft_tokens, draft_probs, target_probs, seeds, fresh_seeds)
    B = len(seeds)
    first, replay, dependence = _replay_and_dependence(verifier, rows, seeds, fresh_seeds, collision, subject,
                                                       max_rows)
    narrowing_rows = tuple(np.asarray(a)[:min(B, NARROWING_ROWS)] for a in rows)  # views
    narrowing = check_seed_narrowing(verifier, narrowing_rows, rng, subject, max_rows)
    if first is None:
        return (replay, dependence, narrowing,
                SeedCheck("batch independence", False, subject, B, 0, 0.0, replay.detail),
                SeedCheck("single-request path", False, subject, B, 0, 0.0, replay.detail))
    return (replay, dependence, narrowing,
            _batch_independence_shifted(verifier, rows, seeds, fresh_seeds, first, subject, rng, max_rows),
            check_single_request_path(verifier, rows, seeds, first, subject, collision, max_rows))


MIXING_SEEDS = (9001, 9002)  # the models of ``mixing_rows``


def mixing_rows(V: int, K: int, L: int, dtype, rng: np.random.Generator, n: int):
    """n rows (draft_tokens int64 [n, K, L], draft_probs [n, K, L, V], target_probs [n, K, L+1, V],
    as numpy arrays of ``dtype``) of a prefix-dependent pair: target ``RandomModel(V, 9001)``,
    draft its even mixture with ``RandomModel(V, 9002)``, each row K i.i.d. draft blocks drawn with
    ``rng``, so rows differ from row to row (the batch checks of ``certify_lossless``:
    ``lossless_seed_checks``).  float32 rows are the float64 rows rounded (a valid row to float32
    rounding, which verifiers accept)."""
    from spectr_gbv.reference.decode import Decoder, DecodeState
    from spectr_gbv.reference.models import Mixture, RandomModel
    from spectr_gbv.reference.randomness import SamplingSource

    target = RandomModel(V, MIXING_SEEDS[0], 1.0)
    dec = Decoder(Mixture(target, RandomModel(V, MIXING_SEEDS[1], 1.0), 0.5), target, K, L)
    source = SamplingSource(rng)
    parts = [dec.block_inputs(DecodeState(), dec.draft_blocks(DecodeState(), source)) for _ in range(n)]
    tokens = np.stack([p[0] for p in parts]).astype(np.int64)
    return tokens, np.stack([p[1] for p in parts]).astype(dtype), np.stack([p[2] for p in parts]).astype(dtype)


def lossless_seed_checks(verifier, tables, K: int, seeds: CaseSeeds, subject: str) -> list[SeedCheck]:
    """The deterministic checks of ``oracle.lossless.certify_lossless`` (its report's
    ``seed_checks``): ``UNKNOWN_LAW_ROWS`` rows of the first call of a generation (the root
    context, K i.i.d. draft blocks per row drawn from ``seeds.check_rng()``: rows of different
    drafts side by side) of ``tables`` (an ``oracle.lossless._PrefixTables``: ``context``,
    ``gather``; ``LARGE_CHECK_ROWS`` = 64 rows of a ``_VocabRows`` when the run has pairs of a real
    vocabulary only, each batch in calls of at most 2^27 probabilities), seeds ``seeds.check_seeds(B)`` and ``check_seeds(B, fresh=True)``; no law is
    known, so c is not computed (module doc).  Every other row is replaced by a row of
    ``mixing_rows`` (a prefix-dependent pair at the same V and L: a pair's first-call rows can be
    one row for every draft, as a context-free pair's are, and a row reading its neighbour's
    inputs would not show).  The five checks of ``check_batch_contract``
    ("seed replay", "seed dependence", "seed narrowing", "batch independence", "single-request
    path": every row re-run alone), then the output checks of oracle/output_checks.py on that
    batch with a greedy row (``greedy_rows``: T = 0) after every 32nd row (``OUTPUT_CHECK_NAMES``:
    shapes, τ / num_emitted / padding, accepted tokens, support; "greedy rows": each greedy row
    emits its argmax path) and "inputs not modified" on writable copies of it: the same checks as
    ``oracle.harness.certify_verifier``'s (which runs the output checks on every call, and knows
    each greedy row's τ from the registered rule).  The order of the checks is
    ``oracle.harness.CONTRACT_CHECK_NAMES``."""
    from spectr_gbv.oracle.output_checks import OutputChecks, inputs_not_modified

    # rows of a real vocabulary (a run of VocabPairs only): 64 rows, each a call of K·3·V probabilities
    B = UNKNOWN_LAW_ROWS if getattr(tables, "L", None) is not None else LARGE_CHECK_ROWS
    start, prob = tables.context(())
    rng = seeds.check_rng()
    index = start + rng.choice(prob.size, size=(B, K), p=prob)
    rows = tables.gather(index)
    if getattr(tables, "L", None) is not None:  # a toy pair: every other row from a prefix-dependent pair
        extra = mixing_rows(tables.V, K, tables.L, np.asarray(rows[1]).dtype, rng, B // 2)
        rows = tuple(np.asarray(a).copy() for a in rows)
        for a, e in zip(rows, extra):
            a[1::2] = e
    row_seeds = seeds.check_seeds(B)
    cap = max(1, min(MAX_CHECK_ROWS, CALL_PROBABILITIES // (K * (2 * rows[0].shape[2] + 1) * rows[1].shape[-1])))
    max_rows = cap if cap < B else None  # a real vocabulary: calls of at most 2^27 probabilities
    checks = list(check_batch_contract(verifier, *rows, row_seeds, seeds.check_seeds(B, fresh=True),
                                       np.random.default_rng(seeds.node(NARROWING_STREAM)), collision=None,
                                       subject=subject, max_rows=max_rows))
    if max_rows is not None:  # the output and input checks on the rows one call holds
        B = max_rows * GREEDY_EVERY // (GREEDY_EVERY + 1)
        rows, row_seeds = tuple(np.asarray(a)[:B] for a in rows), row_seeds[:B]
    # the output checks on the batch with a greedy row (T = 0) after every 32nd row
    greedy = greedy_rows(rows)
    at = np.arange(0, B, GREEDY_EVERY)
    index = np.insert(np.arange(B), at + 1, B + at)
    both = tuple(np.concatenate([a, g])[index] for a, g in zip(rows, greedy))
    both_seeds = np.concatenate([row_seeds, seeds.check_seeds(B, fresh=True)[:B]])[index]
    outputs = OutputChecks(subject)
    try:
        verdict = verifier(*both, seeds=both_seeds)
        outputs.add(verdict, both, both_seeds, f"the check's batch with {at.size} greedy rows")
        checks += outputs.results()
        checks.append(_greedy_path_check(verdict, both, index >= B, subject))
    except Exception as err:  # noqa: BLE001 - a defect of the verifier: every output check fails
        from spectr_gbv.oracle.output_checks import OUTPUT_CHECK_NAMES

        checks += [SeedCheck(name, False, subject, len(index), 0, 0.0, f"the verifier raised on the check's batch of "
                             f"{len(index)} rows: {type(err).__name__}: {err}") for name in OUTPUT_CHECK_NAMES + ("greedy rows",)]
    return checks + [inputs_not_modified(verifier, rows, row_seeds, subject)]


GREEDY_EVERY = 32  # one greedy row after every 32nd row of ``certify_lossless``'s output-check call


def greedy_rows(rows):
    """The greedy (T = 0) version of rows (draft_tokens [B, K, L], draft_probs, target_probs):
    every draft a copy of draft 0, draft rows one-hot at the drafted tokens, target rows one-hot
    at their argmax (lowest id among ties), in the rows' dtype.  A lossless verifier emits the
    argmax path on them: each emitted token is its row's argmax (``oracle.mixed_batches``'
    greedy rows, whose exact τ is the registered rule's, are ``greedy_filler``)."""
    tokens, dp, tp = (np.asarray(a) for a in rows)
    K = tokens.shape[1]
    tokens = np.repeat(tokens[:, :1], K, axis=1)
    target = np.repeat(tp[:, :1], K, axis=1)
    one_tp = np.zeros(target.shape, dtype=tp.dtype)
    np.put_along_axis(one_tp, target.argmax(axis=-1)[..., None], 1, axis=-1)
    one_dp = np.zeros(tokens.shape + (dp.shape[-1],), dtype=dp.dtype)
    np.put_along_axis(one_dp, tokens[..., None], 1, axis=-1)
    return tokens, one_dp, one_tp


def _greedy_path_check(verdict, rows, is_greedy: np.ndarray, subject: str) -> SeedCheck:
    """"greedy rows" of ``certify_lossless``: each emitted token of a greedy row is the argmax of
    its row (τ itself is the rule's: a lossless rule may reject an argmax draft)."""
    tau = np.asarray(to_numpy(verdict.tau)).astype(np.int64).reshape(-1)
    tokens = np.asarray(to_numpy(verdict.tokens)).astype(np.int64)
    L = rows[0].shape[2]
    path = np.asarray(rows[2])[:, 0].argmax(axis=-1)  # [B, L + 1]: the argmax path (every draft is draft 0)
    rows_g = np.flatnonzero(is_greedy)
    bad = [b for b in rows_g.tolist() if not 0 <= tau[b] <= L or (tokens[b, :tau[b] + 1] != path[b, :tau[b] + 1]).any()]
    n = rows_g.size
    if bad:
        b = bad[0]
        return SeedCheck("greedy rows", False, subject, n, len(bad), 0.0,
                         f"{len(bad)} of {n} greedy rows (T = 0: one-hot rows) emit a token that is not its row's "
                         f"argmax; first: row {b}, τ = {int(tau[b])}, tokens {tokens[b].tolist()}, argmax path "
                         f"{path[b].tolist()}")
    return SeedCheck("greedy rows", True, subject, n, 0, 0.0,
                     f"{n} greedy rows (T = 0: one-hot rows) beside the others: each emits its argmax path")


def seed_table(checks) -> str:
    """A markdown table of a certification's deterministic checks (seed contract, batch, outputs,
    inputs): check, rows used, rows changed or failing, the false-alarm probability, verdict,
    detail; the failed checks first; then each failed check's reproducer (``SeedCheck.reproducer``)
    as a code block."""
    checks = sorted(checks, key=lambda c: c.passed)
    lines = ["| contract check | rows | rows changed or failing | false alarm | verdict | detail |",
             "|---|---|---|---|---|---|"]
    for c in checks:
        fa = "n/a" if math.isnan(c.false_alarm) else f"{c.false_alarm:.2g}"
        lines.append(f"| {c.name} ({c.subject}) | {c.rows} | {c.changed} | {fa} | {c.verdict} | {c.detail} |")
    for c in checks:
        if not c.passed and c.reproducer:
            lines += ["", f"Reproducer of the failed check {c.name!r}:", "", "```python", c.reproducer, "```"]
    return "\n".join(lines)
