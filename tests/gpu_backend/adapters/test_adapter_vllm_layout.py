"""vLLM v1's rejection-sampler layout (gpu_backend.adapters.vllm_layout), both ways.

Round trip: our torch rules run in vLLM's layout (``rules_in_vllm_layout``), put back behind
the batched contract (``from_vllm_layout``) and certified by the public harness against the
exact laws of "sd" and "bv" on the toy, zeros and equal families (V = 3, 3, 4; K = 1, L = 3),
through the adapter's realistic batches (temperatures 0.6/1.0/1.7 and filler requests; the
planted defects those catch are in test_adapter_vllm_realistic.py).  N = 20,000 per case at
α = 1e-6 per case: detectable δ (TV, power 0.99) ≤ 0.03 on these families (measured
0.027–0.029).  Layout mistakes are caught: a verifier that drops the bonus (its 0-draft
filler emits nothing; without fillers, equal family: E[τ] 2 against the exact 3), one that
reads target_logits in the older order (all draft rows, then the B bonus rows: a filler's
row; without fillers, the law), and one that reads ``draft_probs=None`` as uniform rows
instead of one-hot drafts.  ``draft_probs=None`` with our sd follows the exact law of
reference sd whose draft rows are the indicators of the drafted tokens.  Mixed draft lengths,
greedy requests, determinism per seed and the argument errors are checked directly.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from spectr_gbv.gpu_backend.adapters.vllm_layout import (
    bonus_logits_indices,
    generators_from_seeds,
    target_logits_indices,
)
from spectr_gbv.gpu_backend.adapters.vllm_adapter import from_vllm_layout, parse_output
from spectr_gbv.gpu_backend.adapters.vllm_rules import rules_in_vllm_layout
from spectr_gbv.oracle.certify import FixedCase
from spectr_gbv.oracle.certify_cases import case_family
from spectr_gbv.oracle.harness import certify_verifier
from helpers.verifier_cases import one_torch_thread  # noqa: F401,E402  (autouse fixture)

N = 20_000
ALPHA = 1e-6
FAMILIES = ("toy", "zeros", "equal")


def _certify(verifier, rule, families=FAMILIES, cases=()):
    return certify_verifier(verifier, rule, K=1, L=3, families=families, cases=cases, n_samples=N, alpha=ALPHA)


def _one_hot_case() -> FixedCase:
    """The toy case of sd with draft rows replaced by the indicators of the drafted tokens."""
    toy = case_family("toy", "sd", 1, 3)
    one_hot = np.eye(toy.V)[toy.draft_tokens]  # [1, L, V]
    return FixedCase("sd toy one-hot drafts V=3 K=1 L=3", "sd", "sd", toy.draft_tokens, one_hot,
                     toy.target_probs, backend_dtype="float64")


def _mixed_inputs(V=6, counts=(3, 0, 2), seed=0):
    g = torch.Generator().manual_seed(seed)
    num_tokens, B = sum(counts), len(counts)
    logits = torch.randn(num_tokens + B, V, generator=g, dtype=torch.float64)
    dp = torch.softmax(torch.randn(num_tokens, V, generator=g, dtype=torch.float64), dim=-1)
    ids = torch.randint(0, V, (num_tokens,), generator=g)
    return list(counts), ids, dp, logits


# -- round trip, certified -----------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["sd", "bv"])
def test_round_trip_certified(rule):
    report = _certify(from_vllm_layout(rules_in_vllm_layout(rule)), rule)
    assert report.ok, report.table()
    assert len(report.results) == 3
    assert all(r.detectable_tv < 0.031 for r in report.results)


def test_dropped_bonus_is_caught():
    inner = rules_in_vllm_layout("sd")

    def no_bonus(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures, *, generators=None):
        out = inner(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures,
                    generators=generators)
        n = torch.tensor(num_draft_tokens)
        full = (out != -1).sum(dim=1) == n + 1
        out[full, n[full]] = -1  # forgets the bonus of fully accepted requests
        return out

    (r,) = _certify(from_vllm_layout(no_bonus), "sd", families=("equal",)).results  # a verdict, not an exception
    assert r.verdict == "FAIL" and r.failed_tests == ["verifier output"]
    assert re.search(r"filler request 1 \(bonus only: 0 drafts, T = 1.3\) emitted no token", r.failed_checks[0][1])
    (r,) = _certify(from_vllm_layout(no_bonus, fillers=False), "sd", families=("equal",)).results
    assert r.verdict == "FAIL" and r.exact_mean_tau == 3.0 and r.mean_tau == 2.0
    assert r.failed_tests == ["joint outcome", "law of τ", "token given (τ, prefix)", "mean τ"]


def test_older_row_order_is_caught():
    inner = rules_in_vllm_layout("sd")

    def old_order(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures, *, generators=None):
        # reads rows 0..num_tokens-1 as the draft rows and the last B rows as the bonus rows
        num_tokens = sum(num_draft_tokens)
        misread = torch.empty_like(target_logits)
        misread[target_logits_indices(num_draft_tokens)] = target_logits[:num_tokens]
        misread[bonus_logits_indices(num_draft_tokens)] = target_logits[num_tokens:]
        return inner(num_draft_tokens, draft_token_ids, draft_probs, misread, temperatures, generators=generators)

    (r,) = _certify(from_vllm_layout(old_order), "sd", families=("toy",)).results
    assert r.failed_tests == ["verifier output"] and re.search(r"filler request \d+ \(", r.failed_checks[0][1])
    report = _certify(from_vllm_layout(old_order, fillers=False), "sd", families=("toy",))
    assert not report.ok and report.results[0].empirical_tv > 3 * report.results[0].detectable_tv


# -- one-hot drafts (draft_probs=None) --------------------------------------------------------------

def test_none_draft_probs_follow_the_one_hot_law():
    report = _certify(from_vllm_layout(rules_in_vllm_layout("sd"), one_hot_drafts=True), "sd",
                      families=(), cases=(_one_hot_case(),))
    assert report.ok, report.table()


def test_none_read_as_uniform_is_caught():
    inner = rules_in_vllm_layout("sd")

    def uniform_for_none(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures, *,
                         generators=None):
        if draft_probs is None:  # the mistake: "no draft probabilities" read as a flat draft
            draft_probs = torch.full((len(draft_token_ids), target_logits.shape[1]), 1.0 / target_logits.shape[1],
                                     dtype=target_logits.dtype)
        return inner(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures,
                     generators=generators)

    report = _certify(from_vllm_layout(uniform_for_none, one_hot_drafts=True), "sd", families=(),
                      cases=(_one_hot_case(),))
    (r,) = report.results
    assert r.verdict == "FAIL" and r.mean_tau > r.mean_ci[0] and not r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]


def test_one_hot_drafts_must_be_one_hot():
    case = case_family("toy", "sd", 1, 3)
    adapter = from_vllm_layout(rules_in_vllm_layout("sd"), one_hot_drafts=True)
    with pytest.raises(ValueError, match="one-hot"):
        adapter(case.draft_tokens[None], case.draft_probs[None], case.target_probs[None], seeds=np.array([0]))


# -- mixed lengths, greedy, determinism --------------------------------------------------------------

@pytest.mark.parametrize("rule", ["sd", "bv", "gbv"])
def test_mixed_lengths_shape_padding_and_determinism(rule):
    counts, ids, dp, logits = _mixed_inputs()
    fn = rules_in_vllm_layout(rule)
    out = fn(counts, ids, dp, logits, seeds=[11, 12, 13])
    assert out.shape == (3, 4) and out.dtype == torch.int32
    tau, tokens = parse_output(out[2:, :3], ids[3:5].numpy()[None], 6)  # request 2: 2 drafts
    assert (out[2, 3] == -1) and 0 <= tau[0] <= 2
    assert (out[1, 1:] == -1).all() and 0 <= out[1, 0] < 6  # 0 drafts: only the bonus
    parse_output(out[:1], ids[:3].numpy()[None], 6)  # request 0 well formed
    assert torch.equal(out, fn(counts, ids, dp, logits, seeds=[11, 12, 13]))
    via_generators = [fn(counts, ids, dp, logits, generators=generators_from_seeds([11, 12, 13])) for _ in range(2)]
    assert torch.equal(via_generators[0], via_generators[1])
    # a request's outcome depends on its own rows and seed only
    other = fn(counts, ids, dp, logits, seeds=[99, 12, 13])
    assert torch.equal(other[1:], out[1:])
    alone = fn([2], ids[3:5], dp[3:5], logits[5:8], seeds=[13])  # request 2: rows 5, 6 and bonus 7
    assert torch.equal(alone[0], out[2, :3])
    several = {tuple(fn(counts, ids, dp, logits, seeds=[11, 12, s]).flatten().tolist()) for s in range(20)}
    assert len(several) > 1


def test_all_requests_without_drafts():
    _, _, _, logits = _mixed_inputs(counts=(0, 0))
    out = rules_in_vllm_layout("sd")([0, 0], torch.zeros(0, dtype=torch.int64), None, logits, seeds=[1, 2])
    assert out.shape == (2, 1) and (out >= 0).all()


@pytest.mark.parametrize("rule", ["sd", "bv", "gbv"])
@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_greedy_requests_follow_the_argmax(rule, with_draft_probs):
    counts, ids, dp, logits = _mixed_inputs(counts=(3, 2, 1, 0))
    ids[0] = logits[0].argmax()  # request 0's first draft is the target's argmax
    ids[3:5] = logits[4:6].argmax(dim=1)  # request 1's drafts are both the argmax: its bonus is emitted
    out = rules_in_vllm_layout(rule)(counts, ids, dp if with_draft_probs else None, logits, torch.zeros(4),
                                     seeds=[1, 2, 3, 4])
    rows = target_logits_indices(counts).tolist()
    bonus = bonus_logits_indices(counts).tolist()
    d = 0
    for b, n in enumerate(counts):
        expect = []
        for i in range(n):
            top = int(logits[rows[d + i]].argmax())
            expect.append(top)
            if top != int(ids[d + i]):
                break
        else:
            expect.append(int(logits[bonus[b]].argmax()))
        d += n
        assert out[b, : len(expect)].tolist() == expect and (out[b, len(expect):] == -1).all()


# -- errors ---------------------------------------------------------------------------------------------

def _call_with(**override):
    counts, ids, dp, logits = _mixed_inputs()
    args = dict(num_draft_tokens=counts, draft_token_ids=ids, draft_probs=dp, target_logits=logits,
                temperatures=None)
    args.update(override)
    seeds = args.pop("seeds", [1, 2, 3])
    generators = args.pop("generators", None)
    return rules_in_vllm_layout("sd")(**args, seeds=seeds, generators=generators)


@pytest.mark.parametrize("override, name", [
    (dict(num_draft_tokens=[3, -1, 2]), "num_draft_tokens"),
    (dict(num_draft_tokens=[]), "num_draft_tokens"),
    (dict(draft_token_ids=torch.zeros(4, dtype=torch.int64)), "draft_token_ids"),
    (dict(draft_token_ids=torch.full((5,), 6)), "draft_token_ids"),
    (dict(draft_token_ids=torch.zeros(5)), "draft_token_ids"),
    (dict(draft_probs=torch.full((5, 5), 0.2)), "draft_probs"),
    (dict(target_logits=torch.zeros(5, 6)), "older layout"),
    (dict(target_logits=torch.zeros(7, 6)), "target_logits"),
    (dict(temperatures=torch.ones(2)), "temperatures"),
    (dict(temperatures=torch.tensor([1.0, -1.0, 1.0])), "temperatures"),
    (dict(seeds=[1, 2]), "seeds"),
    (dict(generators={5: torch.Generator()}), "generators"),
    (dict(generators={0: torch.Generator()}), "not both"),
])
def test_layout_errors_name_the_argument(override, name):
    with pytest.raises(ValueError, match=name):
        _call_with(**override)


def test_adapter_shape_errors():
    case = case_family("toy", "sd", 1, 3)
    adapter = from_vllm_layout(rules_in_vllm_layout("sd"))
    two = np.concatenate([case.draft_tokens, case.draft_tokens])[None]
    with pytest.raises(ValueError, match="draft_tokens"):
        adapter(two, np.stack([case.draft_probs[0]] * 2)[None], np.stack([case.target_probs[0]] * 2)[None])
    with pytest.raises(ValueError, match="target_probs"):
        adapter(case.draft_tokens[None], case.draft_probs[None], case.target_probs[None, :, :3])
    with pytest.raises(ValueError, match="fn must be callable"):
        from_vllm_layout(3)


@pytest.mark.parametrize("row, problem", [
    ([-1, -1, -1, -1], "no token"),
    ([0, -1, 2, -1], "before a token"),
    ([7, -1, -1, -1], "outside"),
    ([-3, -1, -1, -1], "outside"),
    ("not the draft", "accepted drafts"),
])
def test_malformed_output_is_refused(row, problem):
    case = case_family("toy", "sd", 1, 3)
    if row == "not the draft":  # τ = 1, but the accepted token differs from the drafted one
        row = [(int(case.draft_tokens[0, 0]) + 1) % case.V, 0, -1, -1]
    rows = (case.draft_tokens[None], case.draft_probs[None], case.target_probs[None])
    adapter = from_vllm_layout(lambda *a, **k: torch.tensor([row], dtype=torch.int32), realistic=False)
    with pytest.raises(ValueError, match=problem):
        adapter(*rows, seeds=np.array([0]))


def test_output_of_the_wrong_shape_is_refused():
    case = case_family("toy", "sd", 1, 3)
    rows = (case.draft_tokens[None], case.draft_probs[None], case.target_probs[None])
    wrong_shape = from_vllm_layout(lambda *a, **k: torch.zeros(1, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="output_token_ids must have shape .* fillers"):
        wrong_shape(*rows, seeds=np.array([0]))
    floats = from_vllm_layout(lambda *a, **k: torch.zeros(1, 4), realistic=False)
    with pytest.raises(ValueError, match="integer"):
        floats(*rows, seeds=np.array([0]))
