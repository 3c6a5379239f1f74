"""Exact synthetic language models and planted samplers, to measure the sequence tests' size and
power by simulation (tests/oracle/test_sequence_family.py, benchmarks/sequence_power.py) and to
serve a loopback test server (tests/helpers/fake_deployment.py).

``MarkovChain``: an order-1 Markov model over V tokens: the law of the next token given the
prefix is row ``prefix[-1]`` of a fixed row-stochastic matrix, each row a softmax of Gaussian
logits scaled so that its entropy is a chosen value in ``entropy`` (nats).  Its laws are exact, so
the tests' null laws are exact.

``sample`` draws a continuation with one planted defect (``DEFECTS``) or none:

- ("temperature", T'): tokens from p^{1/T'} (normalised) instead of p (T = 1);
- ("top_p", ρ): tokens from the top-p nucleus of p (the fewest most probable tokens reaching
  mass ρ), renormalised;
- ("top_k", k): tokens from the k most probable (ties by id), renormalised;
- ("min_p", μ): tokens of probability ≥ μ·max p, renormalised;
- ("leak", ε): tokens from (1 − ε)·p + ε·q, q the draft chain's law (``draft``);
- ("stale", ε): with probability ε a token is drawn from the law one position earlier (the law
  given the prefix without its last token), as a sampler reading stale logits would.
"""

from __future__ import annotations

import numpy as np

DEFECTS = ("temperature", "top_p", "top_k", "min_p", "leak", "stale")


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _entropy(p: np.ndarray) -> float:
    live = p > 0
    return float(-(p[live] * np.log(p[live])).sum())


class MarkovChain:
    """An exact order-1 Markov language model (module doc).

    Args:
        V: vocabulary size (≥ 2).
        seed: the model's seed (its logits).
        entropy: (low, high): each row's entropy in nats is drawn uniformly in this range.
        base: optional logits [V, V] to perturb instead of drawing new ones (a draft model close
            to a target: ``draft``).
        noise: standard deviation of the perturbation of ``base``.
    Attributes:
        probs: float64 [V, V], row i the law of the next token after token i.
    """

    def __init__(self, V: int = 512, seed: int = 0, entropy=(2.0, 4.0), base=None, noise: float = 0.0):
        if not (isinstance(V, int) and V >= 2):
            raise ValueError(f"V must be an integer ≥ 2, got {V!r}")
        rng = np.random.default_rng(seed)
        if base is None:
            logits = rng.standard_normal((V, V))
            targets = rng.uniform(entropy[0], entropy[1], V)
            for i in range(V):
                lo, hi = 0.0, 50.0
                for _ in range(60):  # the scale whose softmax has the target entropy
                    mid = 0.5 * (lo + hi)
                    if _entropy(_softmax(logits[i] * mid)) > targets[i]:
                        lo = mid
                    else:
                        hi = mid
                logits[i] *= 0.5 * (lo + hi)
        else:
            logits = np.asarray(base, dtype=np.float64) + noise * rng.standard_normal((V, V))
        self.V = V
        self.logits = logits
        self.probs = _softmax(logits)

    def draft(self, noise: float = 1.0, seed: int = 1) -> "MarkovChain":
        """A draft model: this chain's logits plus Gaussian noise of standard deviation ``noise``."""
        return MarkovChain(self.V, seed, base=self.logits, noise=noise)

    def laws(self, prompt, tokens) -> np.ndarray:
        """float64 [len(tokens), V]: row t the law of tokens[t] given prompt + tokens[:t]."""
        seq = list(prompt) + list(tokens)
        start = len(prompt)
        return self.probs[[seq[start + t - 1] for t in range(len(tokens))]]

    def sample(self, prompt, n: int, rng: np.random.Generator, defect=None, draft=None) -> list[int]:
        """n tokens after ``prompt`` (non-empty), with ``defect`` (module doc) or exact.

        Raises:
            ValueError: an unknown defect, or a leak without ``draft``.
        """
        if defect is not None and defect[0] not in DEFECTS:
            raise ValueError(f"defect must be one of {DEFECTS} (with its size), got {defect!r}")
        if defect is not None and defect[0] == "leak" and draft is None:
            raise ValueError("a leak needs the draft chain (draft=)")
        seq = list(prompt)
        out = []
        for _ in range(n):
            p = self.probs[seq[-1]]
            if defect is not None:
                kind, size = defect
                if kind == "temperature":
                    p = _softmax(self.logits[seq[-1]] / float(size))
                elif kind in TRUNCATIONS:
                    p = TRUNCATIONS[kind](p, size)
                elif kind == "leak":
                    p = (1.0 - size) * p + size * draft.probs[seq[-1]]
                elif kind == "stale" and len(seq) >= 2 and rng.random() < size:
                    p = self.probs[seq[-2]]
            x = int(rng.choice(self.V, p=p))
            out.append(x)
            seq.append(x)
        return out


def top_p(p: np.ndarray, rho: float) -> np.ndarray:
    """The law p restricted to its top-p nucleus (fewest most probable tokens reaching ρ; ties by
    id), renormalised."""
    order = np.lexsort((np.arange(p.size), -p))
    cum = np.cumsum(p[order])
    size = int(np.searchsorted(cum, rho - 1e-12)) + 1
    keep = np.zeros_like(p)
    keep[order[:size]] = p[order[:size]]
    return keep / keep.sum()


def top_k(p: np.ndarray, k: int) -> np.ndarray:
    """The law p restricted to its k most probable tokens (ties by id), renormalised."""
    order = np.lexsort((np.arange(p.size), -p))
    keep = np.zeros_like(p)
    keep[order[:int(k)]] = p[order[:int(k)]]
    return keep / keep.sum()


def min_p(p: np.ndarray, mu: float) -> np.ndarray:
    """The law p restricted to tokens of probability ≥ μ·max p, renormalised."""
    keep = np.where(p >= float(mu) * p.max(), p, 0.0)
    return keep / keep.sum()


TRUNCATIONS = {"top_p": lambda p, s: top_p(p, float(s)), "top_k": top_k, "min_p": min_p}


def temperature_tv(chain: MarkovChain, T: float) -> float:
    """The mean per-token TV between the chain's rows and their tempered versions (rows weighted
    equally): the size of a temperature defect in the omnibus test's unit."""
    q = _softmax(chain.logits / T)
    return float(0.5 * np.abs(q - chain.probs).sum(axis=1).mean())


def stationary_entropy(chain: MarkovChain) -> float:
    """The mean row entropy in nats (rows weighted equally)."""
    return float(np.mean([_entropy(r) for r in chain.probs]))


def defect_matrix(chain: MarkovChain, defect, draft: MarkovChain | None = None) -> np.ndarray:
    """The row-stochastic matrix a planted sampler draws from, row i after token i (the "stale"
    defect draws from the chain's own rows, one position earlier: ``sample_many`` handles it)."""
    if defect is None or defect[0] == "stale":
        return chain.probs
    kind, size = defect
    if kind == "temperature":
        return _softmax(chain.logits / float(size))
    if kind in TRUNCATIONS:
        return np.stack([TRUNCATIONS[kind](row, size) for row in chain.probs])
    if kind == "leak":
        if draft is None:
            raise ValueError("a leak needs the draft chain (draft=)")
        return (1.0 - size) * chain.probs + size * draft.probs
    raise ValueError(f"defect must be one of {DEFECTS} (with its size), got {defect!r}")


def sample_many(chain: MarkovChain, first, n: int, rng: np.random.Generator, defect=None,
                draft: MarkovChain | None = None) -> np.ndarray:
    """int64 [N, n]: one continuation of n tokens after each prompt's last token ``first[i]``,
    all N drawn position by position (inverse CDF), with ``defect`` as ``MarkovChain.sample``."""
    first = np.asarray(first, dtype=np.int64)
    rows = defect_matrix(chain, defect, draft)
    cdf = np.cumsum(rows, axis=1)
    plain = np.cumsum(chain.probs, axis=1)
    out = np.empty((first.size, n), dtype=np.int64)
    prev, prev2 = first, first.copy()
    for t in range(n):
        table = cdf[prev]
        if defect is not None and defect[0] == "stale" and t >= 1:
            stale = rng.random(first.size) < defect[1]
            table = np.where(stale[:, None], plain[prev2], table)
        u = rng.random(first.size) * table[:, -1]
        x = np.minimum((table < u[:, None]).sum(axis=1), chain.V - 1)
        out[:, t] = x
        prev2, prev = prev, x
    return out
