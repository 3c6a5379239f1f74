"""The seeds the harness sends (oracle/seeding.py) and the seed contract it checks
(oracle/seed_contract.py): hashed 63-bit row seeds, independent runs at nearby base seeds, and
the "seed replay" / "seed dependence" / "batch independence" checks of every certification
(the third: tests/oracle/test_batch_independence.py), and beside them the public doors' other
contract checks (seed narrowing: tests/oracle/test_seed_narrowing.py; the single-request path
and the output checks: tests/oracle/test_production_batches.py).

Statistics: the one sampled rate here (first tokens repeating between runs at seeds s and s + 1)
is compared with its exact chance rate 5/9 over n = 19,000 pairs: |rate − 5/9| ≤ 5 σ,
σ = √(5/9 · 4/9 / n) = 0.0036, false alarm 5.7e-7 (normal approximation), detecting a deviation
≥ 0.027 with power 0.99.  The certifications run at α = 1e-6 per case; the seed checks'
false-alarm rate is 0 (replay, batch independence) and < 1e-12 (seed dependence, c^B from the case's exact law,
asserted below; seed narrowing, by its sign test).  Everything is seeded: the outcomes asserted are reproducible.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import numpy as np
import pytest

from spectr_gbv.oracle.certify import chunk_seeds
from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
from spectr_gbv.oracle.lossless import ToyPair
from spectr_gbv.oracle.pytest_plugin import CertificationFailed, assert_lossless
from spectr_gbv.oracle.harness import CONTRACT_CHECK_NAMES
from spectr_gbv.oracle.mixed_batches import CHECK_ROWS
from spectr_gbv.oracle.seed_contract import (FALSE_ALARM, MAX_CHECK_ROWS, NARROWING_ROWS, REPLAY_ROWS, SEED_CHECK_NAMES,
                                             SEED_CONTRACT_NAMES, collision_probability, rows_needed)
from spectr_gbv.oracle.seeding import CaseSeeds
from spectr_gbv.reference.models import ContextFree
from spectr_gbv.reference.rules import get_rule

EXAMPLE = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "certify_lossless.py"))
sampler_match = EXAMPLE["sampler_match"]
SD = get_rule("sd")
TOY = ToyPair("toy", ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]))


def _old_chunk_seeds(seed: int, chunk_index: int, B: int) -> np.ndarray:
    """The seeds before oracle/seeding.py: a 62-bit hash of seed + chunk index, then + 0..B−1."""
    from spectr_gbv.reference.seeds import generator_seed

    return np.arange(B, dtype=np.int64) + np.int64(generator_seed(seed + chunk_index) >> 2)


# -- the seeds ---------------------------------------------------------------------------------

def test_row_seeds_are_distinct_63_bit_words_across_rows_calls_cases_and_base_seeds():
    """98,304 seeds: base seeds −1, 0, 1, cases 0 and 1, calls 0..7, 2,048 rows each: no two
    equal (a collision has probability ≈ n²/2 · 2^-63 = 5e-10), all in [0, 2^63), int64."""
    parts = [CaseSeeds(s, case).row_seeds(call, 2048) for s in (-1, 0, 1) for case in (0, 1) for call in range(8)]
    seeds = np.concatenate(parts)
    assert seeds.dtype == np.int64 and seeds.size == 98_304
    assert np.unique(seeds).size == seeds.size
    assert seeds.min() >= 0  # int64 cannot exceed 2^63 − 1
    # their top bits are spread: each of the 16 top-4-bit buckets holds 1/16 ± 5σ of them
    top = np.bincount((seeds >> 59).astype(np.int64), minlength=16) / seeds.size
    assert np.all(np.abs(top - 1 / 16) < 5 * math.sqrt(1 / 16 * 15 / 16 / seeds.size))


def test_chunk_seeds_is_the_case_tree_and_replays():
    assert np.array_equal(chunk_seeds(5, 3, 100), CaseSeeds(5, 0).row_seeds(3, 100))
    assert np.array_equal(chunk_seeds(5, 3, 100, case=2), CaseSeeds(5, 2).row_seeds(3, 100))
    assert np.array_equal(chunk_seeds(5, 3, 100), chunk_seeds(5, 3, 100))
    assert chunk_seeds(5, 3, 0).shape == (0,)
    # a Generator from the tree replays too, and differs across cases
    a, b = CaseSeeds(5, 1).draft_rng().random(4), CaseSeeds(5, 1).draft_rng().random(4)
    assert np.array_equal(a, b) and not np.array_equal(a, CaseSeeds(5, 2).draft_rng().random(4))


@pytest.mark.parametrize("c", [1, 2, 7])
def test_neighbouring_base_seeds_share_no_seed(c):
    """The old seeds had chunk_seeds(s, c) == chunk_seeds(s + 1, c − 1) (asserted on
    ``_old_chunk_seeds``); now they share nothing, nor with neighbouring chunks."""
    assert np.array_equal(_old_chunk_seeds(0, c, 4096), _old_chunk_seeds(1, c - 1, 4096))
    mine = chunk_seeds(0, c, 4096)
    others = np.concatenate([chunk_seeds(1, c - 1, 4096), chunk_seeds(1, c, 4096), chunk_seeds(0, c - 1, 4096),
                             chunk_seeds(0, c + 1, 4096), chunk_seeds(-1, c, 4096), chunk_seeds(0, c, 4096, case=1)])
    assert np.intersect1d(mine, others).size == 0


def test_float32_casts_of_one_chunk_stay_apart():
    """A verifier that narrows its seed to float32 (24-bit mantissa) keeps the rows of a chunk
    apart: the expected number of colliding pairs among B = 4,096 uniform 63-bit seeds is
    C(B, 2)·Σ_e P(exponent e)²·2^-23 ≈ 0.33 (Σ ≈ 1/3); at most 5 rows lost (P ≈ 1.5e-6 under
    Poisson(0.33)).  The old seeds (consecutive integers near 2^61) cast to 1 or 2 values."""
    new = chunk_seeds(0, 0, 4096).astype(np.float32)
    assert np.unique(new).size >= 4096 - 5
    assert np.unique(_old_chunk_seeds(0, 0, 4096).astype(np.float32)).size <= 2


def test_bad_seed_arguments():
    with pytest.raises(ValueError, match="seed must be an integer"):
        chunk_seeds(0.5, 0, 3)
    with pytest.raises(ValueError, match="call must be an integer >= 0"):
        chunk_seeds(0, -1, 3)
    with pytest.raises(ValueError, match="B must be an integer >= 0"):
        chunk_seeds(0, 0, -3)
    with pytest.raises(ValueError, match="case must be an integer >= 0"):
        CaseSeeds(0, -1)


def _recording(verifier, calls: list):
    def rec(draft_tokens, draft_probs, target_probs, *, seeds):
        out = verifier(draft_tokens, draft_probs, target_probs, seeds=seeds)
        calls.append(np.asarray(out.tokens)[:, 0].copy())
        return out
    return rec


def test_runs_at_neighbouring_seeds_are_independent_replicates():
    """First emitted tokens of ``sampler_match`` (a target draw from the row's seed) on the toy
    pair, certify_lossless at seeds 0 and 1 (K = 1, L = 1, N = 20,000, chunk 1,000): call c + 1
    of seed 0 against call c of seed 1, c = 0..18, the rows the old seeds gave the same seeds
    (measured with them: 100.0 % of the 19,000 first tokens repeat).  Two independent draws from the target (1/3, 2/3)
    coincide with probability exactly 1/9 + 4/9 = 5/9 (statistics: module doc)."""
    firsts = {}
    for s in (0, 1):
        calls: list = []
        report = certify_lossless(_recording(sampler_match, calls), K=1, L=1, models=[TOY], n_samples=20_000,
                                  seed=s, chunk=1000)
        assert report.ok, report.table()
        firsts[s] = [c for c in calls if c.size == 1000][:20]  # the first round of the decode
    a = np.concatenate(firsts[0][1:20])
    b = np.concatenate(firsts[1][0:19])
    rate, chance = float(np.mean(a == b)), 5 / 9
    sigma = math.sqrt(chance * (1 - chance) / a.size)
    assert a.size == 19_000
    assert abs(rate - chance) <= 5 * sigma, (rate, chance, sigma)


# -- the checks --------------------------------------------------------------------------------

def test_rows_needed_and_collision_probability():
    assert collision_probability({"a": 0.5, "b": 0.25, "c": 0.25}) == pytest.approx(0.375, abs=1e-15)
    assert rows_needed(0.5) == REPLAY_ROWS
    B = rows_needed(0.99)
    assert B == 2750 and 0.99 ** B < FALSE_ALARM <= 0.99 ** (B - 1)
    assert rows_needed(0.995) is None  # 5,512 rows > MAX_CHECK_ROWS
    assert rows_needed(1.0) is None and rows_needed(0.0) == REPLAY_ROWS
    assert MAX_CHECK_ROWS == 4096
    with pytest.raises(ValueError, match="collision"):
        rows_needed(1.5)


def _checks(report) -> dict:
    return {c.name: c for c in report.seed_checks}


def test_a_verifier_that_keeps_the_contract_passes_the_checks():
    report = certify_verifier(SD, "sd", K=1, L=3, families=("toy", "zeros"), n_samples=4096)
    assert report.ok, report.table()
    checks = _checks(report)
    assert tuple(checks) == CONTRACT_CHECK_NAMES
    replay, dep = checks["seed replay"], checks["seed dependence"]
    assert replay.passed and replay.changed == 0 and replay.false_alarm == 0.0
    assert dep.passed and dep.changed > 0 and dep.false_alarm < FALSE_ALARM
    # the check batch: rows of both cases, neighbours from different cases, at least 513 rows
    assert replay.rows == dep.rows >= CHECK_ROWS and "rows of 2 cases" in replay.subject
    assert "seed replay" in report.table() and "seed dependence" in report.table()
    rows = [r for r in report.to_json() if r.get("kind") == "seed contract"]
    assert [r.get("check") for r in rows] == list(SEED_CONTRACT_NAMES)
    assert all(r["verdict"] == "PASS" for r in rows)
    assert len(report.to_json()) == len(report.results) + len(CONTRACT_CHECK_NAMES) + len(report.probes)


_GLOBAL = np.random.default_rng(2024)


def global_rng_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Lossless per row, but its randomness comes from one global Generator, not from seeds."""
    return SD(draft_tokens, draft_probs, target_probs, seeds=_GLOBAL.integers(0, 2**63, len(seeds)))


def fixed_stream_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Ignores its seeds: every call reseeds row b with b (identical calls, identical outputs)."""
    return SD(draft_tokens, draft_probs, target_probs, seeds=np.arange(len(seeds), dtype=np.int64))


def leaky_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Uses its seeds, but every 16th row draws from a global Generator (not reproducible)."""
    seeds = np.array(seeds, dtype=np.int64)
    seeds[::16] = _GLOBAL.integers(0, 2**63, seeds[::16].size)
    return SD(draft_tokens, draft_probs, target_probs, seeds=seeds)


def float32_seeded_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Lossless per row, but narrows each seed to float32 before seeding its row's stream."""
    narrowed = np.asarray(seeds).astype(np.float32).astype(np.float64).astype(np.uint64)
    return SD(draft_tokens, draft_probs, target_probs, seeds=narrowed)


def test_a_global_rng_verifier_fails_as_ignoring_its_seeds_not_as_a_wrong_law():
    """Its law is SD's (every case passes its tests at N = 4,096, one call per case), yet
    both checks fail: the replay changes about as many rows as fresh seeds do."""
    report = certify_verifier(global_rng_sd, "sd", K=1, L=3, families=("toy", "zeros"), n_samples=4096)
    assert not report.ok
    assert all(r.passed for r in report.results), report.table()
    checks = _checks(report)
    assert not checks["seed replay"].passed and "not reproducible from its seeds" in checks["seed replay"].detail
    assert not checks["seed dependence"].passed and "ignores its seeds" in checks["seed dependence"].detail
    with pytest.raises(CertificationFailed, match="ignores its seeds") as failed:
        assert_lossless(global_rng_sd, "sd", K=1, L=3, families=("toy",), n_samples=4096)
    assert "cases fail" not in str(failed.value).splitlines()[0]  # no case is blamed
    assert "breaks the seed contract" in str(failed.value)


def test_a_verifier_reseeding_a_fixed_stream_ignores_its_seeds():
    """Deterministic, so replay passes; fresh seeds change no row (a correct verifier changes
    none with probability ≤ c^B < 1e-12, the case's exact law): "ignores its seeds"."""
    report = certify_verifier(fixed_stream_sd, "sd", K=1, L=3, families=("toy",), n_samples=4096)
    assert all(r.passed for r in report.results), report.table()
    checks = _checks(report)
    assert checks["seed replay"].passed
    dep = checks["seed dependence"]
    assert not dep.passed and dep.changed == 0 and dep.false_alarm < FALSE_ALARM
    assert dep.detail.startswith(f"ignores its seeds: the same {dep.rows} rows with fresh seeds gave identical outputs")
    assert not report.ok


def test_a_verifier_not_deterministic_given_its_seeds_fails_replay():
    report = certify_verifier(leaky_sd, "sd", K=1, L=3, families=("toy",), n_samples=4096)
    checks = _checks(report)
    assert not checks["seed replay"].passed and checks["seed replay"].changed > 0
    assert checks["seed replay"].detail.startswith("not reproducible from its seeds")
    assert checks["seed dependence"].passed  # it does use its seeds on 15 rows of 16
    assert not report.ok


def test_a_float32_seeded_verifier_passes_the_laws_and_fails_seed_narrowing():
    """Seeding each row from float32(seed) is lossless per row once the harness's seeds are
    unrelated 63-bit words, so every law passes (with the old consecutive seeds a whole chunk shared
    one float32 value: measured then on this call, toy family, K = 1, L = 3, N = 20,000, the case
    FAILED all four tests with p = 0, measured TV 0.235 against δ 0.029).  The contract forbids the
    narrowing all the same: "seed narrowing" sends seeds that round to one float32 and fails it,
    naming the float32 round trip (tests/oracle/test_seed_narrowing.py)."""
    report = certify_verifier(float32_seeded_sd, "sd", K=1, L=3, families=("toy",), n_samples=20_000)
    assert all(r.passed for r in report.results), report.table()
    failed = [c for c in report.seed_checks if not c.passed]
    assert [c.name for c in failed] == ["seed narrowing"] and "(float32 round trip)" in failed[0].detail


def test_certify_lossless_checks_the_seed_contract():
    calls: list = []
    ok = certify_lossless(sampler_match, K=1, L=1, models=[TOY], n_samples=2_000)
    assert ok.ok and tuple(c.name for c in ok.seed_checks) == CONTRACT_CHECK_NAMES  # the same checks as certify_verifier's
    rows = {c.name: c.rows for c in ok.seed_checks}
    assert rows["seed replay"] == rows["single-request path"] == rows["inputs not modified"] == 1024
    assert rows["seed narrowing"] == NARROWING_ROWS and rows["greedy rows"] == 32 and rows["τ, num_emitted and padding"] == 1056
    assert "seed replay" in ok.table()
    assert [r["check"] for r in ok.to_json() if r.get("kind") == "seed contract"][-1] == "single-request path"

    def global_match(draft_tokens, draft_probs, target_probs, *, seeds):
        return sampler_match(draft_tokens, draft_probs, target_probs, seeds=_GLOBAL.integers(0, 2**63, len(seeds)))

    bad = certify_lossless(_recording(global_match, calls), K=1, L=1, models=[TOY], n_samples=2_000)
    assert all(r.passed for r in bad.results), bad.table()
    assert not bad.ok and bad.failed == {"seed contract": ("seed replay", "seed dependence", "batch independence",
                                                           "single-request path")}
    assert "ignores its seeds" in bad.seed_checks[1].detail


def test_fresh_draft_cases_and_several_verifiers_get_their_own_checks():
    """A mapping rule → verifier gets one set of checks per verifier, named by rule; a
    FirstTokenCase alone has no exact law here: its rows are drawn, B = UNKNOWN_LAW_ROWS and the
    false-alarm probability is not stated (NaN)."""
    from spectr_gbv.oracle.certify import certify
    from spectr_gbv.oracle.certify_cases import case_family, lossless_against_target
    from spectr_gbv.oracle.seed_contract import UNKNOWN_LAW_ROWS

    report = certify({"sd": SD, "bv": get_rule("bv")},
                     [case_family("toy", "sd", 1, 2), lossless_against_target("bv", K=1, L=2)], n_samples=2_000)
    assert report.ok, report.table()
    assert [(c.name, c.subject.split(",")[0]) for c in report.seed_checks] == [
        ("seed replay", "rule sd"), ("seed dependence", "rule sd"), ("batch independence", "rule sd"),
        ("seed replay", "rule bv"), ("seed dependence", "rule bv"), ("batch independence", "rule bv")]
    bv_dep = report.seed_checks[4]
    assert bv_dep.rows == UNKNOWN_LAW_ROWS and math.isnan(bv_dep.false_alarm) and bv_dep.changed > 0


def test_a_deterministic_law_does_not_blame_a_verifier_for_identical_outputs():
    """One-hot target rows on a drafted token that the draft also puts all its mass on: SD
    accepts every token and the bonus is certain (c = 1), so identical outputs under fresh seeds
    are no evidence; the check does not enforce them (false alarm 0) and says so."""
    from spectr_gbv.oracle.certify import FixedCase

    L, V = 2, 3
    tokens = np.zeros((1, L), dtype=np.int64)
    one_hot = np.zeros((1, L + 1, V))
    one_hot[..., 0] = 1.0
    case = FixedCase("certain", "sd", "sd", tokens, one_hot[:, :L], one_hot, backend_dtype="float64")
    report = certify_verifier(fixed_stream_sd, "sd", K=1, L=L, families=(), cases=[case], n_samples=500)
    assert report.ok, report.table()
    dep = _checks(report)["seed dependence"]
    assert dep.passed and dep.changed == 0 and dep.false_alarm == 0.0 and "near-deterministic" in dep.detail
