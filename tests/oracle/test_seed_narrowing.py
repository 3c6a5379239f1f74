"""The "seed narrowing" check (oracle/seed_contract.py ``check_seed_narrowing``): seeds chosen to
collide under the usual narrowings must give different outputs, and a verifier that narrows is
told which narrowing, not "law deviation".

The pairs (``narrowing_seeds``) are checked on 5,000 rows: each partner equals its base under its
own narrowing and the coarser ones that contain it, and under no other.  The check's decision is a
sign test that needs no law: among the rows where the partner's and an unrelated seed's outcomes
differ in whether they equal the base's, each is equally likely under the contract, so a narrowing
fails at p ≤ 2·10^-13 and the check's false alarm is ≤ 10^-12 whatever the rows (asserted here
only as "no correct verifier fails", on 20 independent runs: a false alarm there has probability
≤ 2·10^-11).  A narrowing verifier gives every partner of its narrowing the base's outcome: it
fails with p = 2^-m, m ≈ (1 − c)·256 the rows where the unrelated seed's outcome differs (c = 0.43
on average over the rows of the small families here, so m ≈ 146 ≫ the 43 needed).
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.scratch_verifiers import check_rows, sd
from helpers import planted_verifiers as pv
from spectr_gbv.oracle.certify_cases import case_family
from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
from spectr_gbv.oracle.lossless import ToyPair
from spectr_gbv.oracle.mixed_batches import check_batch
from spectr_gbv.oracle.seed_contract import (NARROWING_NAMES, NARROWING_ROWS, check_seed_narrowing, narrowed,
                                             narrowing_seeds)
from spectr_gbv.reference.models import ContextFree

# a partner of each narrowing equals its base under these narrowings (its own and the coarser ones)
NESTED = {"mod 2^16": {"mod 2^16"}, "mod 2^31": {"mod 2^16", "mod 2^31"},
          "mod 2^32": {"mod 2^16", "mod 2^31", "mod 2^32"}, "float32 round trip": {"float32 round trip"},
          "float64 round trip": {"float32 round trip", "float64 round trip"}}


def test_the_pairs_collide_under_their_narrowing_only():
    base, partners, control = narrowing_seeds(np.random.default_rng(5), 5_000)
    assert tuple(partners) == NARROWING_NAMES
    for seeds in (base, control, *partners.values()):
        assert seeds.dtype == np.int64 and (seeds >= 0).all()
    for name, partner in partners.items():
        assert (partner != base).all()
        for other in NARROWING_NAMES:
            same = np.array(narrowed(other, base)) == np.array(narrowed(other, partner))
            assert same.all() if other in NESTED[name] else not same.any(), (name, other)
    assert np.unique(control).size == control.size


def _narrowing(narrow):
    def verifier(draft_tokens, draft_probs, target_probs, *, seeds):
        check_rows(draft_tokens, draft_probs, target_probs)
        return pv.sd(draft_tokens, draft_probs, target_probs, seeds=[narrow(int(s)) for s in seeds])
    return verifier


NARROWING_VERIFIERS = {
    "mod 2^16": lambda s: s % 2**16,
    "mod 2^31": lambda s: s & 0x7FFFFFFF,
    "mod 2^32": lambda s: int(np.int64(s).astype(np.uint32)),  # an unsigned 32-bit cast
    "float32 round trip": lambda s: int(np.float32(s)),
    "float64 round trip": lambda s: int(float(s)),
}


def _rows(n: int = NARROWING_ROWS):
    built = check_batch([case_family(f, "sd", 1, 3) for f in ("toy", "zeros", "disjoint", "coverage")], 0)
    rows, collisions, _, _, _ = built
    return tuple(a[:n] for a in rows), collisions[:n]


@pytest.mark.parametrize("name", list(NARROWING_VERIFIERS))
def test_each_narrowing_is_named(name):
    rows, _ = _rows()
    check = check_seed_narrowing(_narrowing(NARROWING_VERIFIERS[name]), rows, np.random.default_rng(1))
    assert not check.passed and check.false_alarm == 1e-12
    assert f"narrows its seeds ({name})" in check.detail
    assert check.changed == NARROWING_ROWS  # every partner of that narrowing: the base's outcome


def test_a_correct_verifier_passes_on_20_runs():
    rows, collisions = _rows()
    # the rows' outcomes are far from certain: per-row coincidence 0.20-0.86, 0.43 on average
    assert collisions.max() < 0.9 and collisions.mean() < 0.5
    for run in range(20):
        check = check_seed_narrowing(sd, rows, np.random.default_rng(100 + run))
        assert check.passed, check.detail
        assert check.detail.startswith(f"{NARROWING_ROWS} rows, each with a partner seed")


def test_a_verifier_that_raises_fails_it_with_the_error():
    def no_big_batches(draft_tokens, draft_probs, target_probs, *, seeds):
        if len(seeds) > 1000:
            raise MemoryError("batch too large")
        return sd(draft_tokens, draft_probs, target_probs, seeds=seeds)

    rows, _ = _rows()
    check = check_seed_narrowing(no_big_batches, rows, np.random.default_rng(1))
    assert not check.passed and check.detail.endswith("MemoryError: batch too large")


def test_every_door_names_the_narrowing():
    """``certify_verifier`` and ``certify_lossless`` run the same check: a narrowing is a failed
    "seed narrowing" with its name, every law passes (the seeds the laws use are unrelated
    63-bit words, which no narrowing here merges)."""
    narrow = _narrowing(NARROWING_VERIFIERS["mod 2^32"])
    report = certify_verifier(narrow, "sd", K=1, L=3, families=("toy", "zeros"), n_samples=4_096)
    assert all(r.passed for r in report.results), report.table()
    assert [c.name for c in report.seed_checks if not c.passed] == ["seed narrowing"]
    assert "narrows its seeds (mod 2^32)" in report.checks["seed narrowing"].detail
    toy = ToyPair("toy", ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]))
    lossless = certify_lossless(narrow, K=1, L=2, models=[toy], n_samples=2_000)
    assert lossless.failed == {"seed contract": ("seed narrowing",)}
    assert "narrows its seeds (mod 2^32)" in next(c for c in lossless.seed_checks if c.name == "seed narrowing").detail
