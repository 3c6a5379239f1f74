"""oracle.acceptance_test: exact counts on a hand example, the false-alarm rate and the power
measured by simulation from an exact law (a Markov chain target, a prompt-lookup draft, an
exact-match verifier), bad inputs."""

import math

import numpy as np
import pytest

from spectr_gbv.oracle.acceptance_test import acceptance_test, visited_positions

V = 6
P = np.random.default_rng(7).dirichlet(np.full(V, 0.6), size=V)  # target: row = law given the last token
PROMPT = [0, 1, 2, 0, 1, 3, 0, 1]


def lookup(ctx, k=3):
    """Prompt lookup (1-gram): the tokens that followed the last earlier occurrence of ctx[-1]."""
    last = ctx[-1]
    for i in range(len(ctx) - 2, -1, -1):
        if ctx[i] == last:
            return ctx[i + 1:i + 1 + k]
    return []


def engine(rng, n, keep=0.0):
    """An exact-match speculative engine; with probability ``keep`` a differing draft token is kept
    instead of the sample (the defect).  Returns (tokens, laws, drafts)."""
    ctx, out, drafts = list(PROMPT), [], []
    while len(out) < n:
        d = lookup(ctx) if out else []
        drafts.append((len(out), list(d)))
        rejected = False
        for t in d:
            x = int(rng.choice(V, p=P[ctx[-1]]))
            if x != t and rng.random() < keep:
                x = t
            ctx.append(x)
            out.append(x)
            if len(out) == n or x != t:
                rejected = True
                break
        if not rejected and len(out) < n:
            x = int(rng.choice(V, p=P[ctx[-1]]))
            ctx.append(x)
            out.append(x)
    laws = np.array([P[t] for t in (PROMPT[-1:] + out[:-1])])
    return out, laws, drafts


def run(rng, N, n, keep=0.0, alpha=1e-3):
    samples = [engine(rng, n, keep) for _ in range(N)]
    return acceptance_test(*map(list, zip(*samples)), alpha=alpha)


def test_hand_example_exact():
    laws = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]])
    tokens = [1, 2, 2, 0]
    # draft at 0: [1, 0] -> visits 0 (hit, p 0.5), 1 (miss, p 0.2); draft at 2: [2, 1] -> 2 (hit, 0.8), 3 (miss, 1/3)
    a, p = visited_positions(tokens, laws, [(0, [1, 0]), (2, [2, 1])])
    assert a.tolist() == [1, 0, 1, 0]
    assert np.allclose(p, [0.5, 0.2, 0.8, 1 / 3], atol=1e-15)
    r = acceptance_test([tokens], [laws], [[(0, [1, 0]), (2, [2, 1])]])
    E = 0.5 + 0.2 + 0.8 + 1 / 3
    Vr = 0.25 + 0.16 + 0.16 + 2 / 9
    assert (r.n, r.accepted, r.drafts, r.proposed) == (4, 2, 2, 4)
    assert abs(r.expected - E) < 1e-12 and abs(r.variance - Vr) < 1e-12
    assert abs(r.statistic - (2 - E) / math.sqrt(Vr)) < 1e-12
    assert r.passed and r.impossible == 0
    # a draft past the end is cut; a draft kept where the law is 0 fails outright
    r0 = acceptance_test([[2, 2]], [laws[:2] * 0 + [0.0, 0.5, 0.5]], [[(0, [0, 2, 2])]])
    assert (r0.n, r0.accepted) == (1, 0)
    r1 = acceptance_test([[2]], [np.array([[0.5, 0.5, 0.0]])], [[(0, [2])]])
    assert r1.impossible == 1 and r1.pvalue == 0.0 and not r1.passed


def test_degenerate_and_tolerance():
    laws = np.array([[1.0, 0.0], [0.0, 1.0]])
    ok = acceptance_test([[0, 1]], [laws], [[(0, [0, 1])]])
    assert ok.variance == 0 and ok.pvalue == 1.0 and ok.passed
    # the tolerance absorbs |S - E| <= eta * n
    laws = np.full((4, 2), 0.5)
    tokens, drafts = [0, 0, 0, 0], [(0, [0, 0, 0, 0])]
    strict = acceptance_test([tokens], [laws], [drafts])
    assert abs(strict.statistic - 2.0) < 1e-12 and abs(strict.pvalue - 2 * 0.022750131948179195) < 1e-9
    loose = acceptance_test([tokens], [laws], [drafts], tolerance=0.5)
    assert loose.pvalue == 1.0


def test_false_alarm_rate_by_simulation():
    """Under the null (N = 40 sequences of 16 tokens, 1,500 repetitions) the p-value is close to
    uniform: rejection rates at 0.05 and 0.01 within binomial 4-sigma bands of the nominal."""
    rng = np.random.default_rng(1)
    ps = np.array([run(rng, 40, 16).pvalue for _ in range(1500)])
    for a in (0.05, 0.01):
        sd = math.sqrt(a * (1 - a) / ps.size)
        assert abs(np.mean(ps < a) - a) < 4 * sd + 0.004, (a, np.mean(ps < a))


def test_power_against_kept_drafts():
    """The defect 'a differing draft token kept with probability 0.3' at N = 40 x 16 tokens:
    its mean acceptance shift exceeds the stated detectable delta, and the test catches it in
    at least 97 % of 200 repetitions (0.99 stated, normal approximation)."""
    rng = np.random.default_rng(2)
    rs = [run(rng, 40, 16, keep=0.3) for _ in range(200)]
    shift = np.mean([r.rate - r.expected_rate for r in rs])
    det = np.mean([r.detectable for r in rs])
    assert shift > det
    assert np.mean([not r.passed for r in rs]) >= 0.97
    # a correct engine at the same size passes
    assert run(np.random.default_rng(3), 40, 16).passed


@pytest.mark.parametrize("drafts,match", [
    ([[(0, [1]), (0, [1])]], "already visited"),
    ([[(0, [7])]], "outside the vocabulary"),
])
def test_bad_drafts(drafts, match):
    laws = np.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match=match):
        acceptance_test([[1, 1]], [laws], drafts)


def test_bad_arguments():
    laws = [np.full((1, 2), 0.5)]
    with pytest.raises(ValueError, match="one length"):
        acceptance_test([[0]], laws, [])
    with pytest.raises(ValueError, match="alpha"):
        acceptance_test([[0]], laws, [[]], alpha=0)
    with pytest.raises(ValueError, match="tolerance"):
        acceptance_test([[0]], laws, [[]], tolerance=1.5)
    empty = acceptance_test([[0]], laws, [[]])
    assert empty.n == 0 and empty.passed and math.isinf(empty.detectable)
