"""MDBV's node mechanism: the torch port's (gpu_backend/verifiers/mdbv.py, bisections vectorised
over all cuts, written apart from the reference on purpose for speed) against the reference's
(reference/rules/mdbv.py, one cut at a time), node by node.

The two share the schedule (``plan_nodes``) and the tie rule (``reference.ties``) but not the
mechanism code, so this is the check that they compute the same selection law: the marginal
A(x) to 1e-12, ΣA to 1e-12, and the same selection probabilities s_x given any drafted
children.  Rows: peaked, flat, with zeros, with exact ties of q/p, and p = q.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spectr_gbv.gpu_backend.verifiers import mdbv as port
from spectr_gbv.reference.rules import mdbv as ref
from helpers.node_rows import rows


CASES = [(kind, V, m, w, seed) for kind in ("peaked", "flat", "zeros", "ties", "equal")
         for V, m in ((3, 1), (4, 2), (6, 3)) for w, seed in ((1.0, 0), (0.37, 1))]


@pytest.mark.parametrize("kind,V,m,w,seed", CASES)
def test_port_mechanism_equals_reference(kind, V, m, w, seed):
    rng = np.random.default_rng(1000 * seed + 10 * V + m)
    p, q = rows(kind, V, rng)
    mine = port.node_mechanism(p, q, w, m)
    theirs = ref.node_mechanism(p, q, w, m)
    np.testing.assert_allclose(mine.A, theirs.A, rtol=0, atol=1e-12)
    assert abs(mine.total - theirs.total) <= 1e-12
    assert (mine.beta is None) == (theirs.beta is None)  # the same candidate family won
    assert (mine.A <= w * q + 1e-12).all()
    support = [x for x in range(V) if p[x] > 0]
    for r in range(1, min(len(support), m) + 1):  # every set of drafted children, multiplicities
        for xs in itertools.combinations(support, r):
            for counts in itertools.product(range(1, m + 1), repeat=r):
                if sum(counts) > m:
                    continue
                mult = dict(zip(xs, counts))
                a = port.selection_given_children(mine, mult)
                b = ref.selection_given_children(theirs, mult)
                for x in set(a) | set(b):
                    assert abs(a.get(x, 0.0) - b.get(x, 0.0)) <= 1e-12, (mult, x)
