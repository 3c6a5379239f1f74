"""Input probes: what a verifier does with rows no drafter or model can produce.

reference/contract.py ("Inputs a verifier refuses") states the expected behaviour: a verifier
raises ValueError on a NaN or infinite probability, a negative one, a row that does not sum to 1,
and a drafted token of draft probability 0, in the draft rows as in the target rows.  None of
these has a law to test: a verdict computed from them is garbage — ``min(1, q/NaN)`` is 1 in
Python and in ``numpy.fmin``, so a draft of draft probability NaN is accepted outright — and the
statistical families never send them (their rows are valid by construction), so a verifier that
accepts them passes every family.  ``input_probes`` sends each (``INPUT_PROBES``) in one batch of
two rows of a toy case (the corruption in row 1, so a verifier checking row 0 only is caught),
with seeds: it needs no injected noise, so every certification runs it
(``oracle.harness.certify_verifier``, the pytest plugin's ``assert_lossless``,
``oracle.lossless.certify_lossless``; ``oracle.harness.boundary_probes`` runs it beside its
uniform probes).  Each probe passes when the verifier raises ValueError (its message is shown);
it fails when the verifier returns a verdict (the τ and tokens it returned are shown) or raises
anything else (a crash is not a refusal naming the argument).  Deterministic: false alarm 0 for a
verifier that validates its inputs as the contract says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spectr_gbv.reference.contract import to_numpy
from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.models import Mixture, RandomModel
from spectr_gbv.reference.randomness import SamplingSource

__all__ = ["INPUT_PROBES", "Probe", "corrupted", "input_probes", "probe_rows"]


@dataclass
class Probe:
    """One deterministic probe: ``passed`` and what was seen (``detail``)."""

    name: str
    passed: bool
    detail: str


# (name, argument, what is done to row 1 of the batch); x is the token drafted at position 0 of
# draft 0, y another token of the vocabulary.
INPUT_PROBES = (
    ("NaN in draft_probs", "draft_probs", "p(x) = NaN at the drafted token x (min(1, q/NaN) = 1 accepts it)"),
    ("+inf in draft_probs", "draft_probs", "p(x) = +inf at the drafted token x"),
    ("-inf in draft_probs", "draft_probs", "p(y) = −inf at a token y that was not drafted"),
    ("negative draft_probs", "draft_probs", "p(y) = −0.25 at a token y that was not drafted, its mass and 0.25 "
     "moved to x (the row still sums to 1)"),
    ("unnormalised draft_probs", "draft_probs", "every entry of the row doubled (it sums to 2)"),
    ("drafted token of draft probability 0", "draft_probs", "p(x) = 0 at the drafted token x, the row renormalised"),
    ("NaN in target_probs", "target_probs", "q(x) = NaN at the drafted token x"),
)


def probe_rows(K: int, L: int, V: int = 4, seed: int = 11):
    """(draft_tokens int64 [2, K, L], draft_probs float64 [2, K, L, V], target_probs float64
    [2, K, L+1, V]): one valid toy case (V = 4 prefix-dependent models, draft a mixture of the
    target and another model, K drafts sampled with ``seed``) in both batch rows.

    Raises:
        ValueError: K or L < 1, V < 3.
    """
    if K < 1 or L < 1 or V < 3:
        raise ValueError(f"need K >= 1, L >= 1 and V >= 3, got K={K}, L={L}, V={V}")
    target = RandomModel(V, seed, 1.0)
    draft = Mixture(target, RandomModel(V, seed + 7919, 1.0), 0.5)
    dec = Decoder(draft, target, K, L)
    state = DecodeState()
    tokens, dp, tp = dec.block_inputs(state, dec.draft_blocks(state, SamplingSource(seed)))
    return tuple(np.stack([a, a]).copy() for a in (np.asarray(tokens, np.int64), np.asarray(dp, np.float64),
                                                   np.asarray(tp, np.float64)))


def corrupted(rows, name: str, row: int = 1, draft: int = 0, depth: int = 0):
    """Copies of ``rows`` (draft_tokens [B, K, L], draft_probs [B, K, L, V], target_probs
    [B, K, L+1, V]) with the corruption ``name`` of ``INPUT_PROBES`` applied at batch row
    ``row``, draft ``draft``, position ``depth`` (x the token drafted there, y another token).

    Raises:
        ValueError: unknown name (the message lists them), V < 2.
    """
    tokens, dp, tp = (np.array(a, copy=True) for a in rows)
    if dp.shape[-1] < 2:
        raise ValueError(f"corrupted: needs V >= 2, got V = {dp.shape[-1]}")
    x = int(tokens[row, draft, depth])
    y = next(t for t in range(dp.shape[-1]) if t != x)
    prow = dp[row, draft, depth]
    if name == "NaN in draft_probs":
        prow[x] = np.nan
    elif name == "+inf in draft_probs":
        prow[x] = np.inf
    elif name == "-inf in draft_probs":
        prow[y] = -np.inf
    elif name == "negative draft_probs":
        shift = prow[y] + 0.25
        prow[y], prow[x] = -0.25, prow[x] + shift  # the sum is unchanged
    elif name == "unnormalised draft_probs":
        prow *= 2.0
    elif name == "drafted token of draft probability 0":
        prow[x] = 0.0
        if prow.sum() <= 0:  # all the row's mass was on x: move it to y
            prow[y] = 1.0
        prow /= prow.sum()
    elif name == "NaN in target_probs":
        tp[row, draft, depth, x] = np.nan
    else:
        raise ValueError(f"unknown input probe {name!r}; known: {', '.join(n for n, _, _ in INPUT_PROBES)}")
    return tokens, dp, tp


def input_probes(verifier, K: int = 1, L: int = 3) -> list[Probe]:
    """Run ``INPUT_PROBES`` on ``verifier`` (module doc).

    Args:
        verifier: an object with the batched contract (reference/contract.py), called as
            ``verifier(draft_tokens, draft_probs, target_probs, seeds=int64 [2])``.
        K: drafts (1 for a single-draft verifier).  L: block length.
    Returns:
        list of Probe, one per ``INPUT_PROBES`` entry, in that order; ``passed`` when the
        verifier raised ValueError.
    Raises:
        ValueError: K or L < 1 (the caller's arguments).
    """
    base = probe_rows(K, L)
    probes = []
    for name, arg, what in INPUT_PROBES:
        rows = corrupted(base, name)
        try:
            out = verifier(*rows, seeds=np.array([1234, 5678], dtype=np.int64))
        except ValueError as err:
            probes.append(Probe(name, True, f"refused ({what}): {type(err).__name__}: {err}"))
            continue
        except Exception as err:  # a crash is not the contract's refusal
            probes.append(Probe(name, False, f"{what}: raised {type(err).__name__} ({err}) instead of a ValueError "
                                             f"naming {arg} (reference/contract.py)"))
            continue
        try:
            tau, tokens = to_numpy(out.tau).tolist(), to_numpy(out.tokens).tolist()
            seen = f"returned τ = {tau}, tokens {tokens}"
        except Exception:  # noqa: BLE001 - whatever it returned, it did not refuse
            seen = f"returned {type(out).__name__}"
        probes.append(Probe(name, False, f"{what}: {seen} instead of raising ValueError naming {arg} "
                                         "(reference/contract.py: such rows are refused)"))
    return probes
