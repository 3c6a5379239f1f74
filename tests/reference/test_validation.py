"""Bad input raises ValueError naming the argument."""

import numpy as np
import pytest

from spectr_gbv.reference.decode import Decoder
from spectr_gbv.reference.exact import generation_law
from spectr_gbv.reference.models import ContextFree, RandomModel, TableModel, Tempered, model_from_json
from spectr_gbv.reference.randomness import SamplingSource
from spectr_gbv.reference.rules import RULES, get_rule


def good_inputs(K=2, L=2, V=3, seed=0):
    rng = np.random.default_rng(seed)
    dp = rng.dirichlet(np.ones(V), size=(K, L))
    tp = rng.dirichlet(np.ones(V), size=(K, L + 1))
    tokens = np.array([[rng.choice(V, p=dp[k, i]) for i in range(L)] for k in range(K)])
    return tokens, dp, tp


def call(tokens, dp, tp, rule="spectr"):
    return RULES[rule].verify(tokens, dp, tp, SamplingSource(0))


def test_good_inputs_pass():
    v = call(*good_inputs())
    assert 0 <= v.tau <= 2 and len(v.tokens) == v.tau + 1 and all(0 <= t < 3 for t in v.tokens)


@pytest.mark.parametrize("mutate,match", [
    (lambda t, d, q: (t, np.where(d == d.flat[0], np.nan, d), q), "draft_probs: contains NaN"),
    (lambda t, d, q: (t, d, q * 1.5), "target_probs: probabilities are not normalised"),
    (lambda t, d, q: (t, d - 0.5, q), "draft_probs: contains negative"),
    (lambda t, d, q: (t[:, :1], d, q), r"draft_probs must have shape \[K, L, V\]"),
    (lambda t, d, q: (t, d, q[:, :2]), r"target_probs must have shape \[K, L\+1, V\]"),
    (lambda t, d, q: (t, d, np.concatenate([q, np.zeros(q.shape[:2] + (1,))], axis=2)), "vocabulary mismatch"),
    (lambda t, d, q: (t + 3, d, q), r"draft_tokens: token id \d+ outside \[0, V\)"),
    (lambda t, d, q: (t - 10, d, q), r"draft_tokens: token id -?\d+ outside"),
    (lambda t, d, q: (t[0], d, q), r"draft_tokens must have shape \[K, L\]"),
    (lambda t, d, q: (t[:0], d[:0], q[:0]), "K must be >= 1"),
    (lambda t, d, q: (t[:, :0], d[:, :0], q[:, :1]), "L must be >= 1"),
    (lambda t, d, q: (t.astype(float) + 0.5, d, q), "draft_tokens must hold integer token ids"),
])
def test_malformed_inputs(mutate, match):
    with pytest.raises(ValueError, match=match):
        call(*mutate(*good_inputs()))


def test_draft_token_with_zero_draft_probability():
    tokens, dp, tp = good_inputs()
    dp[0, 0] = 0.0
    dp[0, 0, (tokens[0, 0] + 1) % 3] = 1.0
    with pytest.raises(ValueError, match=r"draft_tokens\[0, 0\].*draft probability 0"):
        call(tokens, dp, tp)


@pytest.mark.parametrize("rule", ["sd", "bv", "gbv"])
def test_single_draft_rules_reject_K2(rule):
    with pytest.raises(ValueError, match="single-draft: K must be 1, got K = 2"):
        call(*good_inputs(K=2), rule=rule)


def test_unknown_rule():
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        get_rule("nope")


@pytest.mark.parametrize("K,L,match", [(0, 2, "K must be an integer >= 1"), (2, 0, "L must be an integer >= 1"),
                                       (1.5, 2, "K must be an integer")])
def test_decoder_K_L(K, L, match):
    m = ContextFree([0.5, 0.5])
    with pytest.raises(ValueError, match=match):
        Decoder(m, m, K, L)


def test_vocabulary_mismatch_between_models():
    with pytest.raises(ValueError, match="vocabulary mismatch: draft has V = 2, target has V = 3"):
        generation_law(RULES["sd"], ContextFree([0.5, 0.5]), ContextFree([0.2, 0.3, 0.5]), 1, 1, 3)


def test_n_tokens_positive():
    m = ContextFree([0.5, 0.5])
    with pytest.raises(ValueError, match="n_tokens must be an integer >= 1"):
        generation_law(RULES["sd"], m, m, 1, 1, 0)


@pytest.mark.parametrize("T", [0.0, -1.0, float("nan"), float("inf")])
def test_temperature(T):
    with pytest.raises(ValueError, match="temperature must be > 0"):
        Tempered(ContextFree([0.5, 0.5]), T)


def test_models_reject_bad_rows_and_prefixes():
    with pytest.raises(ValueError, match="probs: probabilities are not normalised"):
        ContextFree([0.5, 0.6])
    with pytest.raises(ValueError, match=r"conditionals\[\(\)\]: expected 2 probabilities"):
        TableModel(2, {(): [1.0]})
    with pytest.raises(ValueError, match="empty prefix"):
        TableModel(2, {(0,): [0.5, 0.5]})
    with pytest.raises(ValueError, match="token id 2 outside"):
        TableModel(2, {(): [0.5, 0.5], (2,): [0.5, 0.5]})
    with pytest.raises(ValueError, match="is not a prefix key"):
        model_from_json({"vocab_size": 2, "conditionals": {"": [0.5, 0.5], "a": [0.5, 0.5]}})
    with pytest.raises(ValueError, match="prefix: token id 5 outside"):
        RandomModel(2, 0).conditional((5,))


@pytest.mark.parametrize("value", [None, "3", "abc", 2.5, float("nan"), float("inf"), -float("inf"),
                                   True, False, np.bool_(True), 0, -1, 0.0, [2], 1 + 0j,
                                   np.timedelta64(3)])
def test_check_positive_int_refuses_with_the_argument_named(value):
    from spectr_gbv.reference.validation import check_positive_int
    with pytest.raises(ValueError, match=r"^K must be an integer >= 1, got "):
        check_positive_int(value, "K")


@pytest.mark.parametrize("value,expected", [(1, 1), (np.int64(4), 4), (np.int32(2), 2), (3.0, 3),
                                            (np.float64(5.0), 5), (10**20, 10**20)])
def test_check_positive_int_accepts_integers(value, expected):
    from spectr_gbv.reference.validation import check_positive_int
    out = check_positive_int(value, "L")
    assert out == expected and type(out) is int


@pytest.mark.parametrize("K", [None, "two", float("nan")])
def test_decoder_bad_K_type_is_one_value_error(K):
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        m = ContextFree([0.5, 0.5])
        Decoder(m, m, K, 2)


def test_check_positive_int_reads_an_int_subclass_by_its_value():
    from spectr_gbv.reference.validation import check_positive_int

    class Odd(int):
        def __int__(self):
            return -5

    assert check_positive_int(Odd(3), "K") == 3
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        check_positive_int(Odd(0), "K")


def test_check_batch_inputs_refuses_what_the_contract_refuses():
    """reference.validation.check_batch_inputs: the input probes' corruptions
    (oracle/input_probes.py), each at row 1 of a valid batch, are refused with the argument named;
    the valid batch passes; and it agrees with check_iteration_inputs row by row."""
    from spectr_gbv.oracle.input_probes import INPUT_PROBES, corrupted, probe_rows
    from spectr_gbv.reference.validation import check_batch_inputs, check_iteration_inputs

    rows = probe_rows(2, 3)
    check_batch_inputs(*rows)
    for name, arg, _ in INPUT_PROBES:
        bad = corrupted(rows, name)
        with pytest.raises(ValueError, match=arg if arg == "target_probs" else "draft_(probs|tokens)"):
            check_batch_inputs(*bad)
        with pytest.raises(ValueError):
            check_iteration_inputs(bad[0][1], bad[1][1], bad[2][1])
    with pytest.raises(ValueError, match="do not match"):
        check_batch_inputs(rows[0], rows[1][:, :, :2], rows[2])
    with pytest.raises(ValueError, match="outside"):
        check_batch_inputs(rows[0] + 10, rows[1], rows[2])
