"""The batched contract as properties, fuzzed by hypothesis in one call: ``assert_contract``.

    from spectr_gbv.oracle.contract_suite import assert_contract
    assert_contract(my_verifier, "sd")          # raises ContractFailed with a reproducer

reference/contract.py states what every verifier owes its caller whatever the rows; the
certifications (oracle/harness.py, oracle/lossless.py) test laws on a few fixed or model-drawn
cases.  ``assert_contract`` draws batches from ``oracle.strategies.batched_inputs`` (random V,
K, L, prefix-dependent rows of every kind: peaked, flat, disjoint supports, target zeros on
drafted tokens, p = q) and seeds, and checks on each (``PROPERTIES``, in this order):

1. "output shapes and dtypes": ``tau``, ``selected`` and ``num_emitted`` integer [B], ``tokens``
   integer [B, L+1];
2. "τ, num_emitted and padding": τ ∈ [0, L], num_emitted = τ + 1, the τ + 1 emitted ids in
   [0, V), −1 after them;
3. "accepted tokens are drafts": where τ > 0, ``selected`` ∈ [0, K) and the τ accepted tokens
   are that draft's first τ tokens;
4. "emitted ids in the target's support": every accepted token, and the correction or bonus
   token, has target probability > 0 in the row it was emitted from (the selected draft's; draft
   0's at τ = 0) — a verifier that accepts a drafted token of target probability 0 fails here;
5. "seed replay": the batch again with the same seeds gives the same τ and tokens;
6. "batch independence": each row alone, and the batch in a drawn order with one more row
   (a copy of a drawn row with another seed), give each row the same τ and tokens (the seed
   contract's check, oracle/seed_contract.py);
7. "impossible inputs refused": one drawn corruption of ``oracle.input_probes.INPUT_PROBES``
   (NaN, ±inf, negative or unnormalised draft rows, a drafted token of draft probability 0,
   NaN in a target row) at a drawn row, draft and position raises ValueError.

Any exception the verifier raises on a valid batch fails the property being checked.  On a
failure hypothesis shrinks the batch (fewer rows, smaller V, K, L, simpler rows) and the
ContractFailed raised carries the minimal failing batch as Python code (``reproducer``): the
arrays in float64 to the last bit (numpy's shortest round-trip repr), the seeds, the call and
the property's check, ready to paste into a test.  The run is deterministic (``derandomize``,
no example database): the same verifier gives the same verdict.  What it does not check: laws
(the certifications' job), and inputs outside the strategies (V ≤ 6, K ≤ 3, L ≤ 3 by default).
"""

from __future__ import annotations

import re
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import HypothesisException
from hypothesis import strategies as st

from spectr_gbv.oracle.input_probes import INPUT_PROBES, corrupted
from spectr_gbv.oracle.strategies import KINDS, batched_inputs
from spectr_gbv.reference.contract import to_numpy

__all__ = ["PROPERTIES", "ContractFailed", "assert_contract", "reproducer"]

PROPERTIES = ("output shapes and dtypes", "τ, num_emitted and padding", "accepted tokens are drafts",
              "emitted ids in the target's support",
              "seed replay", "batch independence", "impossible inputs refused")
_SEEDS = st.integers(min_value=0, max_value=2**63 - 1)


class ContractFailed(AssertionError):
    """``assert_contract``'s failure: ``property`` (one of ``PROPERTIES``), ``detail`` (what was
    seen), ``reproducer`` (Python code of the minimal failing batch: ``reproducer``)."""

    def __init__(self, prop: str, detail: str, code: str):
        super().__init__(f"the verifier breaks the batched contract (reference/contract.py), {prop}: {detail}\n\n"
                         f"Minimal failing batch (shrunk by hypothesis), ready to paste:\n\n{code}")
        self.property, self.detail, self.reproducer = prop, detail, code


class _Broken(Exception):
    """One property's failure inside a hypothesis example (property name, detail, check code)."""

    def __init__(self, prop: str, detail: str, check: str):
        super().__init__(f"{prop}: {detail}")
        self.prop, self.detail, self.check = prop, detail, check


def _array(a) -> str:
    a = np.asarray(a)
    text = np.array2string(a, separator=", ", threshold=sys.maxsize, max_line_width=100,
                           floatmode="unique" if a.dtype.kind == "f" else "maxprec")
    text = re.sub(r"(?<![\w.])-inf\b", "-np.inf", text)
    text = re.sub(r"(?<![\w.-])inf\b", "np.inf", text)
    text = re.sub(r"\bnan\b", "np.nan", text)
    return f"np.array({text}, dtype=np.{a.dtype.name})"


def reproducer(rows, seeds, check: str) -> str:
    """Python code that rebuilds ``rows`` (draft_tokens, draft_probs, target_probs) and ``seeds``
    exactly, calls ``verifier`` on them and runs ``check`` (a statement about ``verdict``)."""
    names = ("draft_tokens", "draft_probs", "target_probs")
    lines = ["import numpy as np", ""] + [f"{n} = {_array(a)}" for n, a in zip(names, rows)]
    lines += [f"seeds = {_array(np.asarray(seeds, dtype=np.int64))}",
              "verdict = verifier(draft_tokens, draft_probs, target_probs, seeds=seeds)", check]
    return "\n".join(lines)


def _outcome(verdict, B: int, L: int):
    """(τ, tokens, selected, num_emitted) as numpy arrays, property 1 checked."""
    try:
        tau, tokens = to_numpy(verdict.tau), to_numpy(verdict.tokens)
        selected, emitted = to_numpy(verdict.selected), to_numpy(verdict.num_emitted)
    except AttributeError as err:
        raise _Broken("output shapes and dtypes", f"the verdict has no {err.name if hasattr(err, 'name') else err}",
                      "assert all(hasattr(verdict, f) for f in ('tau', 'tokens', 'selected', 'num_emitted'))")
    for name, a, shape in (("tau", tau, (B,)), ("selected", selected, (B,)), ("num_emitted", emitted, (B,)),
                           ("tokens", tokens, (B, L + 1))):
        if a.shape != shape or not np.issubdtype(a.dtype, np.integer):
            raise _Broken("output shapes and dtypes", f"{name} is {a.dtype} of shape {list(a.shape)}, expected integers "
                          f"of shape {list(shape)}", f"assert np.asarray(verdict.{name}).shape == {shape}")
    if not np.array_equal(emitted, tau + 1):
        raise _Broken("τ, num_emitted and padding", f"num_emitted {emitted.tolist()} is not τ + 1 = {(tau + 1).tolist()}",
                      "assert (np.asarray(verdict.num_emitted) == np.asarray(verdict.tau) + 1).all()")
    return tau.astype(np.int64), tokens.astype(np.int64), selected.astype(np.int64)


def _check_verdict(rows, verdict) -> tuple:
    """Properties 1-4 on one verdict; (τ, tokens) for the later properties."""
    draft_tokens, draft_probs, target_probs = rows
    B, K, L = draft_tokens.shape
    V = draft_probs.shape[-1]
    tau, tokens, selected = _outcome(verdict, B, L)
    for b in range(B):
        t = int(tau[b])
        if not 0 <= t <= L:
            raise _Broken("τ, num_emitted and padding", f"row {b}: τ = {t} outside [0, {L}]", f"assert 0 <= verdict.tau[{b}] <= {L}")
        if not ((tokens[b, :t + 1] >= 0) & (tokens[b, :t + 1] < V)).all():
            raise _Broken("τ, num_emitted and padding", f"row {b}: emitted ids {tokens[b, :t + 1].tolist()} not all in [0, {V})",
                          f"assert ((verdict.tokens[{b}, :{t + 1}] >= 0) & (verdict.tokens[{b}, :{t + 1}] < {V})).all()")
        if (tokens[b, t + 1:] != -1).any():
            raise _Broken("τ, num_emitted and padding", f"row {b}: tokens {tokens[b].tolist()} not −1 after the τ + 1 = {t + 1} "
                          "emitted", f"assert (verdict.tokens[{b}, {t + 1}:] == -1).all()")
        k = int(selected[b]) if t > 0 else 0
        if t > 0:
            if not 0 <= k < K or not np.array_equal(tokens[b, :t], draft_tokens[b, k, :t]):
                raise _Broken("accepted tokens are drafts", f"row {b}: τ = {t}, selected {k}, accepted "
                              f"{tokens[b, :t].tolist()}; drafts {draft_tokens[b].tolist()}",
                              f"assert (verdict.tokens[{b}, :{t}] == draft_tokens[{b}, verdict.selected[{b}], :{t}]).all()")
        for i in range(t + 1):
            x = int(tokens[b, i])
            if not target_probs[b, k, i, x] > 0:
                what = "accepted" if i < t else ("bonus" if t == L else "correction")
                raise _Broken("emitted ids in the target's support", f"row {b}: the {what} token {x} at position {i} "
                              f"has target probability {float(target_probs[b, k, i, x])!r} in draft {k}'s row",
                              f"assert target_probs[{b}, {k}, {i}, verdict.tokens[{b}, {i}]] > 0")
    return tau, tokens


def _call(verifier, rows, seeds, prop: str):
    try:
        return verifier(*rows, seeds=np.array(seeds, dtype=np.int64))
    except Exception as err:  # a verifier that raises on valid rows breaks the property checked
        raise _Broken(prop, f"the verifier raised on valid rows: {type(err).__name__}: {err}",
                      "# the call above raises") from None


def _one_example(verifier, rows, seeds, data) -> None:
    B = rows[0].shape[0]
    # every draw first, so that an example's data never depends on what the verifier returned
    order = data.draw(st.permutations(range(B)), label="order")
    extra_row = data.draw(st.integers(0, B - 1), label="extra row")
    extra_seed = data.draw(_SEEDS.filter(lambda s: s not in set(int(x) for x in seeds)), label="extra seed")
    name = data.draw(st.sampled_from([n for n, _, _ in INPUT_PROBES]), label="impossible input")
    where = (data.draw(st.integers(0, B - 1), label="row"), data.draw(st.integers(0, rows[0].shape[1] - 1), label="draft"),
             data.draw(st.integers(0, rows[0].shape[2] - 1), label="depth"))
    first = _check_verdict(rows, _call(verifier, rows, seeds, "output shapes and dtypes"))
    again = _check_verdict(rows, _call(verifier, rows, seeds, "seed replay"))
    if not (np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])):
        raise _Broken("seed replay", f"τ {first[0].tolist()} then {again[0].tolist()}, tokens {first[1].tolist()} "
                      f"then {again[1].tolist()}",
                      "again = verifier(draft_tokens, draft_probs, target_probs, seeds=seeds)\n"
                      "assert (again.tau == verdict.tau).all() and (again.tokens == verdict.tokens).all()")
    for b in range(B):
        alone = tuple(a[b:b + 1] for a in rows)
        tau, tokens = _check_verdict(alone, _call(verifier, alone, seeds[b:b + 1], "batch independence"))
        if tau[0] != first[0][b] or not np.array_equal(tokens[0], first[1][b]):
            raise _Broken("batch independence", f"row {b} alone: τ = {int(tau[0])}, tokens {tokens[0].tolist()}; in "
                          f"the batch: τ = {int(first[0][b])}, tokens {first[1][b].tolist()}",
                          f"alone = verifier(draft_tokens[{b}:{b + 1}], draft_probs[{b}:{b + 1}], "
                          f"target_probs[{b}:{b + 1}], seeds=seeds[{b}:{b + 1}])\n"
                          f"assert alone.tau[0] == verdict.tau[{b}] and (alone.tokens[0] == verdict.tokens[{b}]).all()")
    index = list(order) + [extra_row]
    mixed = tuple(a[index] for a in rows)
    mixed_seeds = [int(seeds[j]) for j in order] + [extra_seed]
    tau, tokens = _check_verdict(mixed, _call(verifier, mixed, mixed_seeds, "batch independence"))
    for pos, b in enumerate(order):
        if tau[pos] != first[0][b] or not np.array_equal(tokens[pos], first[1][b]):
            raise _Broken("batch independence", f"row {b} at position {pos} of the batch in the order {list(order)} "
                          f"plus a copy of row {extra_row}: τ = {int(tau[pos])}, tokens {tokens[pos].tolist()}; first: "
                          f"τ = {int(first[0][b])}, tokens {first[1][b].tolist()}",
                          f"index = {index}\nmixed = verifier(draft_tokens[index], draft_probs[index], "
                          f"target_probs[index], seeds=np.array({mixed_seeds}, dtype=np.int64))\n"
                          f"assert mixed.tau[{pos}] == verdict.tau[{b}] and (mixed.tokens[{pos}] == verdict.tokens[{b}]).all()")
    bad = corrupted(rows, name, *where)
    check = ("from spectr_gbv.oracle.input_probes import corrupted\n"
             f"bad = corrupted((draft_tokens, draft_probs, target_probs), {name!r}, *{where})\n"
             "verifier(*bad, seeds=seeds)  # must raise ValueError (reference/contract.py)")
    try:
        verifier(*bad, seeds=np.array(seeds, dtype=np.int64))
    except ValueError:
        return
    except Exception as err:
        raise _Broken("impossible inputs refused", f"{name} at (row, draft, depth) = {where}: raised "
                      f"{type(err).__name__} ({err}) instead of ValueError", check) from None
    raise _Broken("impossible inputs refused", f"{name} at (row, draft, depth) = {where}: returned a verdict instead "
                  "of raising ValueError", check)


def assert_contract(verifier, rule: str | None = None, *, K=None, L=st.integers(min_value=1, max_value=3),
                    V=st.integers(min_value=2, max_value=6), B=st.integers(min_value=1, max_value=4),
                    kinds=KINDS, max_examples: int = 50):
    """Fuzz ``verifier`` against the batched contract's properties (module doc).

    Args:
        verifier: an object with the batched contract (reference/contract.py), called with numpy
            arrays and ``seeds=`` int64 [B].
        rule: the registered rule it claims, or None; only its K is used (K = 1 for a
            single-draft rule, else drawn in 1..3).
        K, L, V, B: ints or hypothesis strategies of ints (K: None for the rule's default).
        kinds: the row kinds of ``oracle.strategies.KINDS`` to draw from.
        max_examples: batches hypothesis tries (≥ 1), before shrinking a failure.
    Returns:
        None when every property held on every batch.
    Raises:
        ContractFailed (an AssertionError): a property failed; its message and ``reproducer``
            hold the shrunk minimal failing batch as code.
        ValueError: unknown rule or kind, max_examples < 1 (the caller's arguments).
    """
    if K is None:
        if rule is None:
            K = st.integers(min_value=1, max_value=3)
        else:
            from spectr_gbv.reference.rules import registry

            registry.spec(rule)
            K = 1 if registry.is_single_draft(rule) else st.integers(min_value=1, max_value=3)
    kinds = tuple(kinds)
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    if isinstance(max_examples, bool) or int(max_examples) != max_examples or max_examples < 1:
        raise ValueError(f"max_examples must be an integer >= 1, got {max_examples!r}")
    seen: dict = {}

    @settings(max_examples=int(max_examples), deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False)
    @given(batch=batched_inputs(B=B, V=V, K=K, L=L, kind=st.sampled_from(kinds)), data=st.data())
    def run(batch, data):
        n = batch[0].shape[0]
        seeds = data.draw(st.lists(_SEEDS, min_size=n, max_size=n, unique=True), label="seeds")
        try:
            _one_example(verifier, batch, seeds, data)
        except _Broken as broken:  # hypothesis replays the shrunk example last: it is kept
            seen["failure"] = (broken, batch, seeds)
            raise

    try:
        run()
    except _Broken:
        broken, batch, seeds = seen["failure"]
        raise ContractFailed(broken.prop, broken.detail, reproducer(batch, seeds, broken.check)) from None
    except HypothesisException:  # a verifier whose failures do not replay (not deterministic)
        if "failure" not in seen:
            raise
        broken, batch, seeds = seen["failure"]
        raise ContractFailed(broken.prop, broken.detail + " (the failure did not replay: the verifier is not "
                             "deterministic given its inputs and seeds; the batch shown is the last failing one, "
                             "not shrunk)", reproducer(batch, seeds, broken.check)) from None
