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
from dataclasses import asdict, dataclass

import numpy as np

from spectr_gbv.oracle.outcome import verdict_word
from spectr_gbv.reference.contract import ContractViolation, to_numpy
from spectr_gbv.oracle.seeding import CaseSeeds

__all__ = ["SeedCheck", "SEED_CHECK_NAMES", "REPLAY_ROWS", "MAX_CHECK_ROWS", "UNKNOWN_LAW_ROWS", "FALSE_ALARM",
           "ALONE_ROWS", "collision_probability", "rows_needed", "check_seed_contract", "call_outcomes",
           "lossless_seed_checks", "seed_table"]

SEED_CHECK_NAMES = ("seed replay", "seed dependence", "batch independence")
ALONE_ROWS = 4
REPLAY_ROWS = 256
MAX_CHECK_ROWS = 4096
UNKNOWN_LAW_ROWS = 1024
FALSE_ALARM = 1e-12


@dataclass(frozen=True)
class SeedCheck:
    """One seed-contract check (module doc).

    Attributes:
        name: "seed replay" or "seed dependence".  passed: its decision.
        subject: the verifier and case whose rows were used.  rows: B.
        changed: rows whose outcome differed from the first call's (replay: under the same
            seeds; dependence: under fresh seeds).
        false_alarm: the probability that a verifier keeping the contract fails this check:
            0 for replay; c^B for dependence (NaN where c is not known, module doc).
        detail: one line saying what was seen.
    """

    name: str
    passed: bool
    subject: str
    rows: int
    changed: int
    false_alarm: float
    detail: str

    @property
    def verdict(self) -> str:
        return verdict_word(self.passed)

    def to_json(self) -> dict:
        d = asdict(self)
        d["check"] = d.pop("name")
        d["kind"] = "seed contract"
        d["verdict"] = self.verdict
        return d


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
    n = int(changed.sum())
    if n == 0:
        return SeedCheck("batch independence", True, subject, B, 0, 0.0, f"{what}: identical outputs")
    b = int(np.flatnonzero(changed)[0])
    return SeedCheck("batch independence", False, subject, B, n, 0.0,
                     f"depends on its batch: {what} gave different outputs in {n} rows (first: row {b}, τ = "
                     f"{int(first[0][b])} in the first call); row b's output must depend on its inputs and "
                     "seeds[b] alone, not on its neighbours, its position or the batch size (reference/contract.py)")


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
    seeds, fresh_seeds = np.asarray(seeds, dtype=np.int64), np.asarray(fresh_seeds, dtype=np.int64)
    B = len(draft_tokens)
    if seeds.shape != (B,) or fresh_seeds.shape != (B,):
        raise ValueError(f"seeds and fresh_seeds must have shape [{B}], got {seeds.shape} and {fresh_seeds.shape}")
    rows = (draft_tokens, draft_probs, target_probs)
    first, err = call_outcomes(verifier, rows, seeds)
    if first is None:
        return tuple(SeedCheck(name, False, subject, B, 0, 0.0, f"the verifier raised on the check's batch of {B} "
                               f"rows: {err}") for name in SEED_CHECK_NAMES)
    again, err_again = call_outcomes(verifier, rows, seeds)
    fresh, err_fresh = call_outcomes(verifier, rows, fresh_seeds)
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

    false_alarm = math.nan if collision is None else float(collision) ** B
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
                      + (f"{false_alarm:.2g} (per-row coincidence {collision:.4g}, the case's exact law)"
                         if collision is not None else "c^B, c its per-row coincidence (not computed here)"))
            dep_ok, why = False, (f"ignores its seeds: the same {B} rows with fresh seeds gave identical outputs in "
                                  f"every row ({chance})")
        else:
            dep_ok = True
            why = f"fresh seeds changed the outputs of {fresh_changed} of {B} rows"
            if collision is not None:
                why += (f" (per-row coincidence {collision:.4g} from the case's exact law; all {B} coincide w.p. "
                        f"{false_alarm:.2g})")
            if not enforce:
                why += ("; identical outputs would not count: the law is near-deterministic on every case, "
                        "only replay-as-fresh is checked")
        dependence = SeedCheck("seed dependence", dep_ok, subject, B, fresh_changed,
                               false_alarm if enforce else 0.0, why)
    return replay, dependence, _batch_independence(verifier, rows, seeds, fresh_seeds, first, subject)


def lossless_seed_checks(verifier, tables, K: int, seeds: CaseSeeds, subject: str) -> list[SeedCheck]:
    """The seed checks of ``oracle.lossless.certify_lossless``: ``UNKNOWN_LAW_ROWS`` rows of the
    first call of a generation (the root context, K i.i.d. draft blocks per row drawn from
    ``seeds.check_rng()``) of ``tables`` (an ``oracle.lossless._PrefixTables``: ``context``,
    ``gather``), seeds ``seeds.check_seeds(B)`` and ``check_seeds(B, fresh=True)``; no law is
    known, so c is not computed (module doc)."""
    B = UNKNOWN_LAW_ROWS
    start, prob = tables.context(())
    index = start + seeds.check_rng().choice(prob.size, size=(B, K), p=prob)
    rows = tables.gather(index)
    return list(check_seed_contract(verifier, *rows, seeds.check_seeds(B), seeds.check_seeds(B, fresh=True),
                                    collision=None, subject=subject))


def seed_table(checks) -> str:
    """A markdown table of seed checks: check, rows used, rows changed, the false-alarm
    probability, verdict, detail."""
    lines = ["| seed check | rows | rows changed | false alarm | verdict | detail |", "|---|---|---|---|---|---|"]
    for c in checks:
        fa = "n/a" if math.isnan(c.false_alarm) else f"{c.false_alarm:.2g}"
        lines.append(f"| {c.name} ({c.subject}) | {c.rows} | {c.changed} | {fa} | {c.verdict} | {c.detail} |")
    return "\n".join(lines)
