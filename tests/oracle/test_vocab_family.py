"""A real vocabulary in the defaults: the "vocab" family of ``certify_verifier`` (V = 151,936,
oracle.certify_cases.vocab_case) and the "vocab" / "vocab-32k" pairs of ``certify_lossless``
(oracle/lossless_pairs.py ``VocabPair``), and the draw defects only a real vocabulary shows.

From-scratch SD variants (tests/helpers/scratch_verifiers.py): the correction and bonus drawn
through a float16 CDF (``float16_cdf_sd``), the correction floored at probability 10^-4
(``floored_residual_sd``), and the planted top-20 truncation (tests/helpers/planted_verifiers.py).
Each is caught by at least two families ("large" and "vocab") and two pairs ("vocab" and
"vocab-32k"; top-k also "wide"), so a user who narrows ``families=`` to one of them keeps the
other.  Exact effects (TV between the defective and the exact law, enumerated here):

| defect | "toy" (V = 3) | "large" (V = 4,096, L = 3) | "vocab" (V = 151,936, L = 1) |
|---|---|---|---|
| float16 CDF | < 10^-3 | 0.0376 | 0.0595 |
| floor 10^-4 on the correction | 0 | 0.0127 | 0.0366 |
| top-20 correction and bonus | 0 | 0.7675 | 0.1210 |
| token ids kept in 16 bits (``uint16_ids_sd``) | 0 | 0 | 1.0000 |

The "vocab" case's rows have a real model's shape (``oracle.certify_cases.HighIdRows``: 94 % of
each row on 32 head tokens at ids ≥ 65,536, V − 1 among them and drafted, the rest a tail of
10^-7–10^-3 per token), so its joint G-test resolves the whole law: δ = 0.163 at its 5,000 rows
(the Zipf rows it replaced: 0.60), the coarsened test δ = 0.072 and the identity test 0.142.

Statistics: α = 1e-6 per case or pair; the vocab case and pairs run at min(N, 5,000) = 5,000
rows.  The float16 CDF and the floor are below the vocab case's stated δ, and the "large" effects
below that case's (0.040 coarsened, 0.065 identity at N = 20,000), but they empty the tail's rank
groups, the coarsened test's direction: in 10 of 10 multinomial samples of each exact law at
N = 5,000 the vocab case's coarsened and joint tests reject (measured for this case, 2026-12-07;
the "large" figures: 100 of 100, benchmarks/VOCAB_POWER.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.planted_verifiers import sd_top_k_20
from helpers.scratch_verifiers import PROBABILITY_FLOOR, float16_cdf_sd, floored_residual_sd, sd
from spectr_gbv.oracle.certify import case_power, exact_verdict_law
from spectr_gbv.oracle.certify_cases import ID_WRAP, VOCAB_SAMPLES, VOCAB_V, case_family, vocab_case
from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
from spectr_gbv.oracle.lossless import VOCAB_TESTS, default_pairs
from spectr_gbv.reference.exact import total_variation
from spectr_gbv.reference.rules import get_rule

ALPHA = 1e-6
PAIRS = {p.name: p for p in default_pairs()}


def _normalised(row):
    return row / row.sum()


def _float16_draw_law(row):
    """The law of ``float16_cdf_draw``'s token: #{j: cdf16[j] ≤ u} for u uniform on [0, 1),
    clipped to V − 1."""
    cdf = np.cumsum(_normalised(row).astype(np.float16), dtype=np.float16).astype(np.float64)
    law = np.diff(np.concatenate([[0.0], np.minimum(cdf, 1.0)]))
    law[-1] += max(0.0, 1.0 - min(cdf[-1], 1.0))
    return np.clip(law, 0.0, None)


def _floored(row):
    r = _normalised(row)
    cut = np.where(r >= PROBABILITY_FLOOR, r, 0.0)
    return cut / cut.sum() if cut.sum() > 0 else r


def _top20(row):
    kth = np.sort(row)[-20] if row.size > 20 else 0.0
    return _normalised(np.where(row >= kth, row, 0.0))


def sd_law(case, correction=_normalised, bonus=_normalised) -> dict:
    """Exact law of (τ, accepted prefix, emitted token) of SD on draft 0 of ``case`` with the
    correction drawn from ``correction((q − p)_+)`` and the bonus from ``bonus(q_L)``."""
    x, p, q = case.draft_tokens[0], case.draft_probs[0], case.target_probs[0]
    L = len(x)
    law, reach = {}, 1.0
    for i in range(L):
        a = min(1.0, q[i, x[i]] / p[i, x[i]])
        residual = np.maximum(q[i] - p[i], 0.0)
        w = correction(residual if residual.sum() > 0 else q[i])
        for t in np.flatnonzero(w > 0):
            law[(i, tuple(int(v) for v in x[:i]), int(t))] = reach * (1 - a) * w[t]
        reach *= a
    w = bonus(q[L])
    for t in np.flatnonzero(w > 0):
        law[(L, tuple(int(v) for v in x), int(t))] = reach * w[t]
    return law


DEFECTS = {"float16 CDF": dict(correction=_float16_draw_law, bonus=_float16_draw_law),
           "floor": dict(correction=_floored), "top-20": dict(correction=_top20, bonus=_top20)}
CASES = {"toy": lambda: case_family("toy", "sd", 1, 3), "large": lambda: case_family("large", "sd", 1, 3),
         "vocab": lambda: vocab_case("sd", 1)}


def test_the_vocab_case_and_what_it_resolves():
    case = vocab_case("sd", 1)
    assert (case.V, case.K, case.L, case.samples_cap) == (VOCAB_V, 1, 1, VOCAB_SAMPLES) == (151_936, 1, 1, 5_000)
    assert case.draft_tokens.tolist() == [[VOCAB_V - 1]]  # drafted on purpose at the last id
    law = exact_verdict_law(get_rule("sd"), case.draft_tokens, case.draft_probs, case.target_probs)
    assert sum(p * o[0] for o, p in law.items()) == pytest.approx(0.4845, abs=1e-4)  # SD accepts about half
    high = sum(p for o, p in law.items() if o[2] >= ID_WRAP or any(x >= ID_WRAP for x in o[1]))
    assert high == pytest.approx(0.9825, abs=1e-4)  # outcomes with an id ≥ 65,536
    power = case_power(case, 20_000, ALPHA)  # capped at 5,000 rows
    assert power.n_tests == 6 and power.joint.n == VOCAB_SAMPLES
    assert power.detectable_tv <= 0.2 and power.detectable_tv == pytest.approx(0.163, abs=1e-3)  # the whole law
    assert power.coarse.detectable_tv_law < 0.08 and power.identity.detectable_tv < 0.15
    assert sd_law(case) == pytest.approx(law, abs=1e-15)  # the helper's law is the reference's
    two = vocab_case("spectr", 2)  # a multi-draft rule's two drafts: both above 65,536
    assert two.draft_tokens[:, 0].tolist() == [VOCAB_V - 1, 145_140] and case_power(two, 5_000).detectable_tv <= 0.2


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_exact_effects(defect):
    """The table of the module doc, exact (to 5·10^-5)."""
    want = {"float16 CDF": (None, 0.0376, 0.0595), "floor": (0.0, 0.0127, 0.0366), "top-20": (0.0, 0.7675, 0.1210)}
    for j, (family, make) in enumerate(CASES.items()):
        case = make()
        tv = total_variation(sd_law(case), sd_law(case, **DEFECTS[defect]))
        if want[defect][j] is None:
            assert tv < 1e-3, (family, tv)
        else:
            assert tv == pytest.approx(want[defect][j], abs=5e-5), (family, tv)


def _wrapped_law(case) -> dict:
    """The exact law of ``uint16_ids_sd`` on ``case``: SD run on the drafted ids mod 2^16, every
    emitted id mod 2^16."""
    import copy

    wrapped = copy.copy(case)
    wrapped.draft_tokens = case.draft_tokens % ID_WRAP
    law: dict = {}
    for (t, acc, tok), pr in sd_law(wrapped).items():
        key = (t, tuple(x % ID_WRAP for x in acc), tok % ID_WRAP)
        law[key] = law.get(key, 0.0) + pr
    return law


def test_16_bit_token_ids_move_the_vocab_law_only():
    """Token ids kept in 16 bits: exact at V ≤ 65,536 (toy, large: TV 0), TV 1.0000 on "vocab"
    (every drafted and most emitted ids are ≥ 65,536; its joint test's δ is 0.163)."""
    for family, make in CASES.items():
        case = make()
        tv = total_variation(sd_law(case), _wrapped_law(case))
        assert tv == (pytest.approx(1.0, abs=1e-4) if family == "vocab" else 0.0), (family, tv)


@pytest.mark.slow  # about 60 s: three verifiers on the two real-vocabulary families
def test_certify_verifier_catches_each_with_two_families():
    twin = certify_verifier(sd, "sd", K=1, L=3, families=("large", "vocab"), alpha=ALPHA)
    assert twin.ok, twin.table()
    for defective in (float16_cdf_sd, floored_residual_sd, sd_top_k_20):
        report = certify_verifier(defective, "sd", K=1, L=3, families=("large", "vocab"), alpha=ALPHA,
                                  input_checks=defective is not sd_top_k_20)
        assert [r.verdict for r in report.results] == ["FAIL", "FAIL"], (defective.__name__, report.table())
        assert all("coarsened law" in r.failed_tests for r in report.results)
        vocab = report.results[1]
        assert vocab.V == VOCAB_V and vocab.n == VOCAB_SAMPLES


@pytest.mark.slow  # about 40 s
def test_certify_lossless_catches_each_with_two_pairs():
    pairs = [PAIRS["vocab"], PAIRS["vocab-32k"]]
    twin = certify_lossless(sd, K=1, L=3, models=pairs)
    assert twin.ok, twin.table()
    assert [tuple(t.name for t in r.tests) for r in twin.results] == [VOCAB_TESTS] * 2
    for defective in (float16_cdf_sd, floored_residual_sd, sd_top_k_20):
        report = certify_lossless(defective, K=1, L=3, models=pairs, input_checks=False)
        assert set(report.failed) == {"vocab", "vocab-32k"}, (defective.__name__, report.table())
        assert all("first token, coarsened" in f for f in report.failed.values())
