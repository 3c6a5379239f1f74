"""The contract suite (oracle/contract_suite.py): the batched contract's properties fuzzed by
hypothesis in one call, ``assert_contract``, and the pytest plugin's ``spectr_contract`` fixture.

Every property is seen to fail on a from-scratch verifier that breaks it (one each), with the
property named and a reproducer that, pasted and run, fails the same way; correct verifiers (the
from-scratch SD, the numpy reference and the torch verifiers of every registered rule) pass.
Deterministic: hypothesis runs derandomized, with no example database.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.planted_verifiers import sd_accepts_zero_target
from helpers.scratch_verifiers import check_rows, nan_accepting_sd, one_stream_sd, sd
from spectr_gbv.oracle.contract_suite import PROPERTIES, ContractFailed, assert_contract
from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import RULES, registry


def _fails(verifier, prop, rule="sd", **kw):
    with pytest.raises(ContractFailed) as failed:
        assert_contract(verifier, rule, **kw)
    err = failed.value
    assert err.property == prop, str(err)
    assert "Minimal failing batch (shrunk by hypothesis), ready to paste:" in str(err)
    return err


def _replay(err, verifier):
    """Run the reproducer as a user would paste it: it must fail (AssertionError or the call's
    error), or, for refused inputs, not raise ValueError."""
    scope = {"verifier": verifier}
    try:
        exec(err.reproducer, scope)
    except ValueError:
        return "ValueError"
    except AssertionError:
        return "AssertionError"
    return "ran"


def test_correct_verifiers_pass():
    assert_contract(sd, "sd")
    for rule in ("sd", "bv", "spectr", "kseq_gbv"):
        assert_contract(RULES[rule], rule, max_examples=25)


@pytest.mark.parametrize("rule", registry.names())
def test_every_torch_verifier_passes(rule):
    from spectr_gbv.gpu_backend.verifiers import get_verifier

    assert_contract(get_verifier(rule), rule, max_examples=25)


def test_batch_dependence_is_caught_with_a_reproducer():
    err = _fails(one_stream_sd, "batch independence")
    assert "seeds = np.array(" in err.reproducer and "draft_probs = np.array(" in err.reproducer
    assert _replay(err, one_stream_sd) == "AssertionError"
    assert _replay(err, sd) == "ran"  # the same batch, the correct verifier: the check holds


def checked_zero_target(draft_tokens, draft_probs, target_probs, *, seeds):
    """tests/helpers/planted_verifiers.py's SD that accepts a draft of target probability 0
    (log-ratio with an infinity guard), its inputs checked: its one defect is the acceptance."""
    check_rows(draft_tokens, draft_probs, target_probs)
    return sd_accepts_zero_target(draft_tokens, draft_probs, target_probs, seeds=seeds)


def test_an_accepted_zero_probability_token_is_caught():
    err = _fails(checked_zero_target, "emitted ids in the target's support")
    assert err.reproducer.count("np.array(") == 4  # three rows and the seeds
    assert _replay(err, checked_zero_target) == "AssertionError"
    assert _replay(err, sd) == "ran"


def test_accepting_impossible_inputs_is_caught():
    err = _fails(nan_accepting_sd, "impossible inputs refused")
    assert "corrupted((draft_tokens, draft_probs, target_probs)" in err.reproducer
    assert _replay(err, nan_accepting_sd) == "ran"  # no ValueError: the defect
    assert _replay(err, sd) == "ValueError"


def _edited(edit):
    def verifier(draft_tokens, draft_probs, target_probs, *, seeds):
        out = sd(draft_tokens, draft_probs, target_probs, seeds=seeds)
        return edit(out, draft_tokens)
    return verifier


@pytest.mark.parametrize("edit, prop", [
    (lambda out, t: BatchVerdict(out.tau, out.selected, out.tokens[:, :-1], out.num_emitted), "output shapes and dtypes"),
    (lambda out, t: BatchVerdict(out.tau, out.selected, out.tokens, out.tau), "τ, num_emitted and padding"),
    (lambda out, t: BatchVerdict(np.minimum(out.tau + 1, t.shape[2]), out.selected, out.tokens,
                                 np.minimum(out.tau + 1, t.shape[2]) + 1), "τ, num_emitted and padding"),
    (lambda out, t: BatchVerdict(out.tau, out.selected, np.where(out.tokens < 0, 0, out.tokens), out.num_emitted),
     "τ, num_emitted and padding"),
    (lambda out, t: BatchVerdict(out.tau, np.where(out.tau > 0, 5, -1), out.tokens, out.num_emitted),
     "accepted tokens are drafts"),
])
def test_each_output_property_is_checked(edit, prop):
    _fails(_edited(edit), prop)


def test_replay_is_checked():
    rng = np.random.default_rng(0)

    def leaky(draft_tokens, draft_probs, target_probs, *, seeds):
        return sd(draft_tokens, draft_probs, target_probs, seeds=np.asarray(seeds) ^ int(rng.integers(1, 8)))

    _fails(leaky, "seed replay")


def test_a_verifier_raising_on_valid_rows_fails_the_first_property():
    def fragile(draft_tokens, draft_probs, target_probs, *, seeds):
        check_rows(draft_tokens, draft_probs, target_probs)
        if draft_probs.shape[-1] > 3:
            raise RuntimeError("V > 3 unsupported")
        return sd(draft_tokens, draft_probs, target_probs, seeds=seeds)

    err = _fails(fragile, "output shapes and dtypes")
    assert "RuntimeError: V > 3 unsupported" in str(err)


def test_arguments():
    assert len(PROPERTIES) == 7
    with pytest.raises(ValueError, match="unknown rule"):
        assert_contract(sd, "nope")
    with pytest.raises(ValueError, match="max_examples"):
        assert_contract(sd, "sd", max_examples=0)
    with pytest.raises(ValueError, match="kinds"):
        assert_contract(sd, "sd", kinds=("bogus",))
