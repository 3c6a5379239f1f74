"""Production batches (oracle/mixed_batches.py): the law families sampled in batches of several
requests, each row tested against its own case's exact law.

Deterministic facts (exact): a zero-padded row has its case's exact law (every registered rule on
every small family); a greedy row's law is one outcome, the argmax path, for every rule; the call
sizes cross the tiles of 64, 128 and 256 rows; neighbours come from different cases.  The one
statistical test: ``certify_verifier`` on the small families at N = 4,096 per case, α = 10^-6 per
case (a correct verifier fails a case with probability ≤ 10^-6; the cases' δ is asserted in
tests/oracle/test_harness.py at the default N).
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.scratch_verifiers import sd
from spectr_gbv.oracle.certify import exact_verdict_law
from spectr_gbv.oracle.certify_cases import case_family
from spectr_gbv.oracle.harness import certify_verifier
from spectr_gbv.oracle.mixed_batches import (BOUNDARY_SIZES, CHECK_ROWS, FILLER_EVERY, SMALL_V, VOCAB_BOUNDARY_SIZES,
                                             VOCAB_MIX_V, boundary_sizes, call_sizes,
                                             certify_mixed, check_batch, greedy_filler, neighbour_order, pad_rows)
from spectr_gbv.reference.rules import get_rule, registry

SMALL_FAMILIES = ("toy", "prefix", "zeros", "disjoint", "equal", "coverage", "onehot")
RULES = ("sd", "bv", "spectr", "gbv", "kseq_gbv", "spectr_gbv", "mdbv")


def _K(rule: str) -> int:
    return registry.default_K(rule, 2)


@pytest.mark.parametrize("rule", RULES)
def test_a_zero_padded_row_has_its_case_s_law(rule):
    for family in SMALL_FAMILIES:
        case = case_family(family, rule, _K(rule), 3)
        tokens, dp, tp = pad_rows(case, SMALL_V)
        assert dp.shape[-1] == tp.shape[-1] == SMALL_V and (dp[..., case.V:] == 0).all()
        want = exact_verdict_law(get_rule(rule), case.draft_tokens, case.draft_probs, case.target_probs)
        got = exact_verdict_law(get_rule(rule), tokens, dp.astype(np.float64) / dp.sum(-1, keepdims=True),
                                tp.astype(np.float64) / tp.sum(-1, keepdims=True))
        # equal to rounding (MDBV on p = q rows leaves outcomes of probability 10^-17 in one and not the other)
        assert all(abs(got.get(o, 0.0) - want.get(o, 0.0)) < 1e-12 for o in {*got, *want}), (family, rule)


@pytest.mark.parametrize("rule", RULES)
def test_a_greedy_row_has_one_outcome_the_argmax_path(rule):
    for family in ("toy", "prefix", "disjoint", "coverage"):
        case = case_family(family, rule, _K(rule), 3)
        filler = greedy_filler(case)
        assert filler is not None, (family, rule)
        argmax = case.target_probs[0].argmax(-1)  # draft 0's rows: the accepted path is draft 0's
        x = case.draft_tokens[0]
        tau = next((i for i in range(case.L) if x[i] != argmax[i]), case.L)
        assert (filler.tau, filler.emitted) == (tau, tuple(int(t) for t in x[:tau]) + (int(argmax[tau]),))
        assert ((filler.dp == 0) | (filler.dp == 1)).all() and (filler.tp.sum(-1) == 1).all()


def test_call_sizes_cross_the_tiles():
    assert call_sizes(20_000, 4096)[:len(BOUNDARY_SIZES)] == list(BOUNDARY_SIZES)
    assert sum(call_sizes(20_000, 4096)) == 20_000 and max(call_sizes(20_000, 4096)) == 4096
    assert call_sizes(100, 4096) == [1, 63, 36]
    assert call_sizes(5_000, 294)[-1] <= 294 and sum(call_sizes(5_000, 294)) == 5_000


def test_neighbours_come_from_different_cases():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(7), 600)
    order = neighbour_order(labels, rng)
    assert sorted(order.tolist()) == list(range(labels.size))
    same = (labels[order][1:] == labels[order][:-1]).mean()
    assert same < 0.05  # balanced labels alternate (a random order: 1/7 = 0.14)


def _recording(verifier, calls: list):
    def recorded(draft_tokens, draft_probs, target_probs, *, seeds):
        calls.append((np.array(draft_tokens), np.array(draft_probs), np.array(seeds)))
        return verifier(draft_tokens, draft_probs, target_probs, seeds=seeds)
    return recorded


def test_the_calls_mix_the_cases_and_every_row_gets_its_own_seed():
    cases = [case_family(f, "sd", 1, 3) for f in ("toy", "zeros", "disjoint", "large")]
    calls: list = []
    run = certify_mixed(_recording(sd, calls), cases, 2_000, 1e-6, 4096, 0)
    assert all(r.passed and r.n == 2_000 for r in run.results), [r.failed_tests for r in run.results]
    small = [c for c in calls if c[1].shape[-1] == 8]  # the small lane: V padded to 8 (disjoint's)
    assert [len(c[2]) for c in small[:len(BOUNDARY_SIZES)]] == [
        s + s // FILLER_EVERY + (s >= 2) for s in BOUNDARY_SIZES]  # the tiles' sizes, plus greedy rows
    rows_64 = small[2]  # the call of 64 rows: rows of the three cases side by side
    vocab_of_row = (rows_64[1][:, 0, 0] > 0).sum(-1)  # tokens of positive draft probability
    assert len(set(vocab_of_row.tolist())) >= 2
    large = [c for c in calls if c[1].shape[-1] == 4096]
    assert len(large[2][2]) > 64 and (large[2][1][:, 0, 0, 8:] == 0).all(axis=-1).any()  # borrowed small rows
    seeds = np.concatenate([c[2] for c in calls])
    assert np.unique(seeds).size == seeds.size  # no two rows of the run share a seed
    assert run.checks[-1].name == "greedy rows" and run.checks[-1].passed and run.checks[-1].rows > 100
    assert all(c.passed for c in run.checks)


def test_the_check_batch():
    cases = [case_family(f, "sd", 1, 3) for f in ("toy", "zeros", "disjoint", "large")]
    rows, collisions, subject, _, max_rows = check_batch(cases, 0)
    assert max_rows is None
    assert len(collisions) == rows[0].shape[0] >= CHECK_ROWS and rows[1].shape[-1] == 8  # small cases only
    assert "rows of 3 cases" in subject and np.prod(collisions) < 1e-12
    V_of = (rows[1][:, 0, 0] > 0).sum(-1)
    assert (V_of[1:] != V_of[:-1]).mean() > 0.5


def test_a_raising_call_stops_only_the_cases_in_it():
    def no_large(draft_tokens, draft_probs, target_probs, *, seeds):
        if np.shape(draft_probs)[-1] > SMALL_V:
            raise MemoryError("V too large")
        return sd(draft_tokens, draft_probs, target_probs, seeds=seeds)

    report = certify_verifier(no_large, "sd", K=1, L=3, families=("toy", "large", "deep"), n_samples=2_000)
    by = {r.name.split()[1]: r for r in report.results}
    assert by["deep"].passed  # another lane
    assert not by["large"].passed and "MemoryError: V too large" in by["large"].failed_checks[0][1]
    assert not by["toy"].passed  # its borrowed rows were in the large lane's calls
    assert "MemoryError: V too large" in by["toy"].failed_checks[0][1] and "V = 4096" in by["toy"].failed_checks[0][1]


def test_a_real_vocabulary_lane_mixes_the_first_tile_only():
    assert boundary_sizes(4_096) == BOUNDARY_SIZES and boundary_sizes(VOCAB_MIX_V) == BOUNDARY_SIZES
    assert boundary_sizes(151_936) == VOCAB_BOUNDARY_SIZES == (1, 63, 64, 65)
    cases = [case_family(f, "sd", 1, 1) for f in ("toy", "vocab")]
    calls: list = []
    run = certify_mixed(_recording(sd, calls), cases, 600, 1e-6, 4096, 0)
    assert all(r.passed for r in run.results), [r.failed_tests for r in run.results]
    vocab = [c for c in calls if c[1].shape[-1] == 151_936]
    mixed = [c for c in vocab if (c[1][:, 0, 0, 8:] == 0).all(axis=-1).any()]  # calls holding borrowed toy rows
    assert 1 <= len(mixed) <= len(VOCAB_BOUNDARY_SIZES) and max(len(c[2]) for c in mixed) <= 65 + 65 // 32 + 1
    assert sum(len(c[2]) for c in vocab) - sum(len(c[2]) for c in mixed) > 300  # the rest: its row repeated
