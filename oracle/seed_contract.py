"""The seed contract, checked: replay and seed dependence of a verifier under certification.

reference/contract.py: row b's randomness comes from seeds[b] alone, so the same seeds give
the same outputs (a run can be replayed) and distinct seeds give independent draws.  A law test
cannot see a breach: a verifier that draws from a global RNG, or that reseeds one fixed stream,
has the right law of outcomes and passes every G-test.  Every certification
(``oracle.certify.certify``, hence ``oracle.harness.certify_verifier`` and the pytest plugin's
``assert_lossless``; ``oracle.lossless.certify_lossless``) therefore runs two deterministic
checks on one batch of B rows (the idea of the vLLM samplers' replay check,
gpu_backend/certify/vllm.py ``replay_checks``, on the harness's own rows and seeds):

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

A verifier that ignores its seeds and draws from a global RNG fails both checks; one that
reseeds a fixed stream on every call fails "seed dependence" only; one that uses its seeds but
mixes in other randomness on some rows fails "seed replay" only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from spectr_gbv.oracle.outcome import verdict_word
from spectr_gbv.reference.contract import to_numpy
from spectr_gbv.oracle.seeding import CaseSeeds

__all__ = ["SeedCheck", "SEED_CHECK_NAMES", "REPLAY_ROWS", "MAX_CHECK_ROWS", "UNKNOWN_LAW_ROWS", "FALSE_ALARM",
           "collision_probability", "rows_needed", "check_seed_contract",
           "lossless_seed_checks", "seed_table"]

SEED_CHECK_NAMES = ("seed replay", "seed dependence")
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
    """(τ int64 [B], tokens int64 [B, L+1] with the positions past τ set to -1) of one call."""
    try:
        tau = np.asarray(to_numpy(out.tau)).astype(np.int64, casting="unsafe").reshape(-1)
        tokens = np.asarray(to_numpy(out.tokens)).astype(np.int64, casting="unsafe")
    except AttributeError as err:
        raise ValueError(f"verifier output has no tau/tokens (the batched contract's BatchVerdict): {err}") from None
    if tau.shape != (B,) or tokens.ndim != 2 or tokens.shape[0] != B:
        raise ValueError(f"verifier returned tau of shape {tau.shape} and tokens of shape {tokens.shape}, "
                         f"expected [{B}] and [{B}, L+1]")
    keep = np.arange(tokens.shape[1])[None, :] <= np.clip(tau, 0, tokens.shape[1] - 1)[:, None]
    return tau, np.where(keep, tokens, -1)


def _changed(a, b) -> int:
    return int(((a[0] != b[0]) | (a[1] != b[1]).any(axis=1)).sum())


def check_seed_contract(verifier, draft_tokens, draft_probs, target_probs, seeds, fresh_seeds, *,
                        collision: float | None = None, subject: str = "") -> tuple[SeedCheck, SeedCheck]:
    """Run the two checks of the module doc on one batch.

    Args:
        verifier: an object with the batched contract (reference/contract.py).
        draft_tokens int64 [B, K, L], draft_probs [B, K, L, V], target_probs [B, K, L+1, V]: the
            rows (numpy, as the certification hands them).
        seeds, fresh_seeds: int64 [B], two unrelated sets (``CaseSeeds.check_seeds``).
        collision: the per-row coincidence probability c of a verifier keeping the contract on
            these rows, or None where unknown (module doc).
        subject: what the rows are, for the report.
    Returns:
        (the "seed replay" SeedCheck, the "seed dependence" SeedCheck).
    Raises:
        ValueError: seeds of the wrong shape; verifier output without τ/tokens of batch size B.
    """
    seeds, fresh_seeds = np.asarray(seeds, dtype=np.int64), np.asarray(fresh_seeds, dtype=np.int64)
    B = len(draft_tokens)
    if seeds.shape != (B,) or fresh_seeds.shape != (B,):
        raise ValueError(f"seeds and fresh_seeds must have shape [{B}], got {seeds.shape} and {fresh_seeds.shape}")
    rows = (draft_tokens, draft_probs, target_probs)
    first = _outcomes(verifier(*rows, seeds=seeds.copy()), B)
    again = _outcomes(verifier(*rows, seeds=seeds.copy()), B)
    fresh = _outcomes(verifier(*rows, seeds=fresh_seeds.copy()), B)
    same_changed, fresh_changed = _changed(first, again), _changed(first, fresh)

    replay_ok = same_changed == 0
    replay = SeedCheck(
        "seed replay", replay_ok, subject, B, same_changed, 0.0,
        f"the same {B} rows with the same seeds, twice: identical outputs" if replay_ok else
        f"not reproducible from its seeds: the same {B} rows with the same seeds, twice, gave different "
        f"outputs in {same_changed} rows (row b's randomness must come from seeds[b] alone: reference/contract.py)")

    false_alarm = math.nan if collision is None else float(collision) ** B
    enforce = collision is None or false_alarm < FALSE_ALARM
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
            why += f" (per-row coincidence {collision:.4g} from the case's exact law; all {B} coincide w.p. {false_alarm:.2g})"
        if not enforce:
            why += ("; identical outputs would not count: the law is near-deterministic on every case, "
                    "only replay-as-fresh is checked")
    return replay, SeedCheck("seed dependence", dep_ok, subject, B, fresh_changed, false_alarm if enforce else 0.0, why)


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
