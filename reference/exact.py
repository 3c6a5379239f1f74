"""Exact laws by enumeration: one iteration, and the first N emitted tokens of a generation.

The law of one iteration sums, over every configuration of the K i.i.d. draft blocks, the
enumerated law of the rule's coins and draws (``enumerate_law`` over the rule's ``decide``, the
same code that samples).  A generation is a dynamic programme over decode states (emitted
tokens + live modification windows), processed by increasing length, so that states reached
along different paths merge.  Cost grows as V^(K·L) per state: toy sizes only.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.draft_stopping import Capped, StoppingPolicy, block_cap, check_policy, stopped_configurations
from spectr_gbv.reference.models import ToyModel
from spectr_gbv.reference.randomness import enumerate_law
from spectr_gbv.reference.rules.base import Block, Rule, make_block
from spectr_gbv.reference.validation import check_positive_int
from spectr_gbv.reference.verdict import Verdict


def draft_paths(decoder: Decoder, state: DecodeState) -> list[tuple[tuple[int, ...], float]]:
    """Every draft block of positive probability after ``state``, with its probability.

    Returns:
        list of (block, p(block)), block a tuple of L token ids.
    """
    out = []

    def walk(block: tuple[int, ...], prob: float) -> None:
        if len(block) == decoder.L:
            out.append((block, prob))
            return
        p_row, _ = decoder.rows(state, block)
        for x in np.flatnonzero(p_row > 0):
            walk(block + (int(x),), prob * float(p_row[x]))

    walk((), 1.0)
    return out


def iteration_law(rule: Rule, decoder: Decoder, state: DecodeState | None = None,
                  stop: StoppingPolicy | None = None) -> dict[Verdict, float]:
    """Exact law of the Verdict of one iteration after ``state`` (drafting included).

    Args:
        rule: a reference Rule.
        decoder: the models, K and L.
        state: decode state (default: start of generation).
        stop: a draft-side stopping policy (reference.draft_stopping); None: always L tokens.
    Returns:
        dict Verdict → probability (float64).
    """
    state = state or DecodeState()
    if check_policy(stop) is not None:
        merged: dict[Verdict, float] = defaultdict(float)
        for (verdict, _), pr in stopped_iteration_law(rule, decoder, state, stop).items():
            merged[verdict] += pr
        return dict(merged)
    paths = draft_paths(decoder, state)
    # Each single-draft block is validated and its joints computed once; a configuration of K
    # drafts is then a stack of K of them (V^(K·L) configurations per state).
    single = {}
    for block, _ in paths:
        one = make_block(*decoder.block_inputs(state, [block]))
        single[block] = (one.tokens[0], one.dp[0], one.tp[0], one.pj[0], one.qj[0], one.log_pj[0], one.log_qj[0])
    law: dict[Verdict, float] = defaultdict(float)
    for combo in itertools.product(paths, repeat=decoder.K):
        prob = 1.0
        for _, pr in combo:
            prob *= pr
        parts = list(zip(*(single[block] for block, _ in combo)))
        prepared = Block(*(np.stack(arrays) for arrays in parts))
        rule.check_draft_count(prepared.K)
        rule.plan(prepared)
        for verdict, pr in enumerate_law(lambda src: rule.decide(prepared, src)).items():
            law[verdict] += prob * pr
    return dict(law)


def stopped_iteration_law(rule: Rule, decoder: Decoder, state: DecodeState,
                          stop: StoppingPolicy) -> dict[tuple[Verdict, int], float]:
    """Exact law of (Verdict, block length S) of one iteration whose drafting ``stop`` may end
    early (reference.draft_stopping).  S is kept beside the verdict because a greedy rule's
    modification window spans the verified block.

    Returns:
        dict (Verdict, S) → probability (float64), S ∈ [1, decoder.L].
    """
    law: dict[tuple[Verdict, int], float] = defaultdict(float)
    for drafts, prob in stopped_configurations(decoder, state, stop):
        block = make_block(*decoder.block_inputs(state, drafts))
        rule.check_draft_count(block.K)
        rule.plan(block)
        for verdict, pr in enumerate_law(lambda src: rule.decide(block, src)).items():
            law[(verdict, block.L)] += prob * pr
    return dict(law)


def expected_tau(rule: Rule, draft: ToyModel, target: ToyModel, K: int, L: int) -> float:
    """Exact E[τ] of the first iteration (empty context).  Block efficiency is E[τ] + 1."""
    law = iteration_law(rule, Decoder(draft, target, K, L))
    return float(sum(pr * v.tau for v, pr in law.items()))


@dataclass
class GenerationLaw:
    """Exact law of the first ``n_tokens`` emitted tokens and the expected number of target
    calls (iterations) needed to emit them."""

    n_tokens: int
    token_law: dict[tuple[int, ...], float]
    expected_target_calls: float
    states_visited: int

    @property
    def tokens_per_call(self) -> float:
        return self.n_tokens / self.expected_target_calls


def generation_law(rule: Rule, draft: ToyModel, target: ToyModel, K: int, L: int,
                   n_tokens: int, stop: StoppingPolicy | None = None, cap: bool = False) -> GenerationLaw:
    """Exact law of the first ``n_tokens`` emitted tokens, Algorithm 2 carried across iterations.

    Args:
        rule: a reference Rule.
        draft, target: toy models on the same vocabulary.
        K, L: drafts and block length (≥ 1).
        n_tokens: N ≥ 1 (use N ≥ L + 2 so that several iterations and the modification count).
        stop: a draft-side stopping policy (reference.draft_stopping); None: always L tokens.
        cap: each iteration drafts at most ``block_cap(emitted, n_tokens, L)`` positions, the
            tokens still needed less the bonus (what the engine does near the end).
    Returns:
        GenerationLaw.
    Raises:
        ValueError: on K, L or n_tokens < 1 or a vocabulary mismatch.
    """
    n_tokens = check_positive_int(n_tokens, "n_tokens")
    check_policy(stop)
    decoder = Decoder(draft, target, K, L)
    frontier: dict[int, dict[tuple, list]] = defaultdict(dict)
    frontier[0][DecodeState().key()] = [DecodeState(), 1.0]
    token_law: dict[tuple[int, ...], float] = defaultdict(float)
    calls = 0.0
    visited = 0
    while frontier:
        length = min(frontier)
        for state, prob in frontier.pop(length).values():
            calls += prob
            visited += 1
            policy = stop
            if cap and block_cap(len(state.tokens), n_tokens, L) < L:
                policy = Capped(block_cap(len(state.tokens), n_tokens, L), stop)
            if policy is None:
                outcomes = {(v, L): pr for v, pr in iteration_law(rule, decoder, state).items()}
            else:
                outcomes = stopped_iteration_law(rule, decoder, state, policy)
            for (verdict, S), pr in outcomes.items():
                nxt = decoder.advance(state, verdict, S)
                if len(nxt.tokens) >= n_tokens:
                    token_law[nxt.tokens[:n_tokens]] += prob * pr
                else:
                    slot = frontier[len(nxt.tokens)].setdefault(nxt.key(), [nxt, 0.0])
                    slot[1] += prob * pr
            decoder.clear_cache()
    return GenerationLaw(n_tokens, dict(token_law), calls, visited)


def target_law(target: ToyModel, n_tokens: int) -> dict[tuple[int, ...], float]:
    """Law of the first ``n_tokens`` tokens sampled from ``target`` alone (the reference law)."""
    n_tokens = check_positive_int(n_tokens, "n_tokens")
    law = {(): 1.0}
    for _ in range(n_tokens):
        nxt = {}
        for seq, pr in law.items():
            row = target.conditional(seq)
            for x in np.flatnonzero(row > 0):
                nxt[seq + (int(x),)] = pr * float(row[x])
        law = nxt
    return law


def total_variation(a: dict, b: dict) -> float:
    """TV distance ½ Σ |a(x) − b(x)| between two laws given as dicts."""
    keys = set(a) | set(b)
    return 0.5 * float(sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys))


@dataclass(frozen=True)
class ExactSummary:
    """One rule's exact values (``spectr-gbv exact``): E[τ] of one iteration after the empty
    context, the TV of the first ``tokens`` emitted tokens to the target's law, and the
    expected target calls of the whole generation (``generation_law``)."""

    rule: str
    K: int
    L: int
    tokens: int
    expected_accepted: float
    capped_blocks: bool
    tv_to_target: float
    expected_target_calls: float
    tokens_per_target_call: float
    seconds: float

    @property
    def block_efficiency(self) -> float:
        return self.expected_accepted + 1.0

    @property
    def lossless(self) -> bool:
        """TV ≤ 1e-12."""
        return self.tv_to_target <= 1e-12

    def to_json(self) -> dict:
        return {"rule": self.rule, "K": self.K, "L": self.L, "tokens": self.tokens,
                "expected_accepted": self.expected_accepted, "block_efficiency": self.block_efficiency,
                "capped_blocks": self.capped_blocks, "tv_to_target": self.tv_to_target,
                "lossless": self.lossless, "expected_target_calls": self.expected_target_calls,
                "tokens_per_target_call": self.tokens_per_target_call, "seconds": self.seconds}


def exact_summary(rule_name: str, draft, target, K: int, L: int, n_tokens: int,
                  cap: bool = False) -> ExactSummary:
    """``ExactSummary`` of the rule ``rule_name`` (``reference.rules.get_rule``).

    Raises:
        ValueError: e.g. a draft token the target gives no row for.
    """
    import time

    from spectr_gbv.reference.rules import get_rule

    rule = get_rule(rule_name)
    start = time.perf_counter()
    e_tau = expected_tau(rule, draft, target, K, L)
    gen = generation_law(rule, draft, target, K, L, n_tokens, cap=cap)
    tv = total_variation(gen.token_law, target_law(target, n_tokens))
    return ExactSummary(rule_name, K, L, n_tokens, e_tau, cap, tv, gen.expected_target_calls,
                        gen.tokens_per_call, time.perf_counter() - start)
