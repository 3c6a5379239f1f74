"""gpu_backend.engine.stack: Algorithm 2's stack of modified targets equals reference/decode.py.

The reference decode loop (``Decoder``) computes the effective target of every block row
from its stack of windows.  Here the same iterations are replayed through
``ModificationStack``: raw target and draft rows in, modified rows out, then the same verdict
(the reference rule's, on the reference's rows) advances both.  Rows and window joints must
agree to 1e-12 (float64, no model involved).
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spectr_gbv.gpu_backend.engine.stack import ModificationStack  # noqa: E402
from spectr_gbv.reference.batched import batch_modification  # noqa: E402
from spectr_gbv.reference.contract import BatchModification  # noqa: E402
from spectr_gbv.reference.decode import Decoder, DecodeState  # noqa: E402
from spectr_gbv.reference.models import RandomModel  # noqa: E402
from spectr_gbv.reference.randomness import SamplingSource  # noqa: E402
from spectr_gbv.reference.rules import get_rule  # noqa: E402


def raw_rows(draft, target, context, drafts, L):
    tp = np.array([[target.conditional(context + blk[:i]) for i in range(L + 1)] for blk in drafts])
    dp = np.array([[draft.conditional(context + blk[:i]) for i in range(L)] for blk in drafts])
    return dp, tp


def replay(rule_name, K, L, V, seed, iterations, concentration=0.7, zero_prob=0.0):
    """Run the reference decoder and the stack side by side; returns how many iterations had
    at least one modified row (so that the comparison is never vacuous)."""
    draft = RandomModel(V, seed, concentration, zero_prob)
    target = RandomModel(V, seed + 1000, concentration, zero_prob)
    decoder = Decoder(draft, target, K, L)
    rule = get_rule(rule_name)
    source = SamplingSource(seed)
    stack = ModificationStack(L)
    state = DecodeState()
    modified = 0
    for _ in range(iterations):
        drafts = decoder.draft_blocks(state, source)
        tokens, dp_ref, tp_ref = decoder.block_inputs(state, drafts)
        dp, tp_raw = raw_rows(draft, target, state.tokens, drafts, L)
        np.testing.assert_array_equal(dp, dp_ref)
        n = len(state.tokens)
        tp, trace = stack.modify(n, torch.tensor(tokens), torch.tensor(dp), torch.tensor(tp_raw))
        np.testing.assert_allclose(tp.numpy(), tp_ref, rtol=0, atol=1e-12)
        if not np.array_equal(tp_ref, tp_raw):
            modified += 1
        verdict = rule.verify(tokens, dp_ref, tp_ref, source)
        mod = batch_modification([verdict.modification])
        if mod is not None:  # the same record with torch fields, as a torch verifier returns it
            mod = BatchModification(mod.kind, mod.K, *(torch.as_tensor(getattr(mod, f)) for f in
                                                       ("rho", "log_q_joint", "log_p_joint", "active")))
        stack.advance(n, list(verdict.tokens), max(verdict.selected, 0), trace, mod, mod is not None)
        state = decoder.advance(state, verdict)
        decoder.clear_cache()
        # the windows: same positions, same joints
        assert [(w.start, w.end) for w in stack.windows] == [(w.start, w.end) for w in state.windows]
        for mine, ref in zip(stack.windows, state.windows):
            for log_joint, joint in ((mine.log_q, ref.q_joint), (mine.log_p, ref.p_joint)):
                if joint == 0:
                    assert log_joint == -math.inf
                else:
                    assert float(log_joint) == pytest.approx(math.log(joint), abs=1e-10)
    return modified


@pytest.mark.parametrize("rule,K,L,V,seed", [
    ("gbv", 1, 3, 3, 1), ("gbv", 1, 5, 4, 2), ("kseq_gbv", 2, 3, 3, 3), ("kseq_gbv", 3, 4, 4, 4),
    ("spectr_gbv_fixed", 2, 4, 3, 5), ("spectr_gbv_fixed", 3, 3, 4, 6),
])
def test_stack_rows_and_joints_equal_reference_decoder(rule, K, L, V, seed):
    modified = replay(rule, K, L, V, seed, iterations=25)
    assert modified >= 5, f"only {modified} iterations had live windows"


def test_stack_with_zero_probability_tokens():
    """Rows with zeros (disjoint supports, weights summing to 0 keep the row beneath)."""
    modified = replay("kseq_gbv", 2, 4, 5, 11, iterations=25, zero_prob=0.5)
    assert modified >= 3


def test_rules_without_modification_leave_rows_untouched():
    stack = ModificationStack(4)
    tp = torch.rand(2, 5, 6)
    out, trace = stack.modify(0, torch.zeros(2, 4, dtype=torch.int64), torch.rand(2, 4, 6), tp)
    assert out is tp and trace is None
    stack.advance(0, [1, 2], 0, trace, None, False)
    assert stack.windows == []
