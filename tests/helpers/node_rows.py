"""Draft and target rows (p, q) of one merged-tree node, by kind: peaked, flat, zeros, ties, equal."""

import numpy as np


def rows(kind: str, V: int, rng: np.random.Generator):
    if kind == "peaked":
        p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    elif kind == "flat":
        p, q = rng.dirichlet(np.full(V, 5.0)), rng.dirichlet(np.full(V, 5.0))
    elif kind == "zeros":
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        p[rng.random(V) < 0.3] = 0.0
        q[rng.random(V) < 0.3] = 0.0
        p[0], q[0] = max(p[0], 0.1), max(q[0], 0.1)
        p, q = p / p.sum(), q / q.sum()
    elif kind == "ties":  # q/p equal on pairs of tokens: the tie rule decides their order
        p = np.full(V, 1.0 / V)
        q = np.repeat(rng.dirichlet(np.ones((V + 1) // 2)), 2)[:V]
        q = q / q.sum()
    else:  # p = q
        p = rng.dirichlet(np.ones(V))
        q = p.copy()
    return p, q
