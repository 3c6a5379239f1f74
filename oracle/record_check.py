"""Algorithm 2's record, checked: what a verifier hands to the next iteration.

A rule that modifies later targets (the reference ``Rule.modifies_targets``: "gbv", "kseq_gbv",
"spectr_gbv_fixed", and any rule a user registers with it) returns with each verdict of τ < L a
record (reference/contract.py, ``BatchModification``): its kind, K, the scale ρ and the log joints
of the emitted tokens (accepted prefix + correction) under the target and the draft handed in,
counted from the window's start.  The next iteration's target is built from it (SpecTr-GBV
Algorithm 2, docs/rules.md §3), so a record off by one position leaves the iteration's own law
untouched — every test of the case passes — and makes the rule lossy over two iterations.

The record is a function of the outcome and the rows: kind, K and ρ are the reference rule's for
that outcome (``reference_records``: every path of the reference's coins enumerated,
``reference.randomness.enumerate_law_draw_last``), the joints are those of the emitted tokens in
the rows the verifier was handed (the contract's definition).  ``RecordCheck`` compares every
sampled row of a certification case (``oracle.certify.certify_case``) with the reference's record
for the same outcome:

* a row with τ < L must carry an active record, a row with τ = L none (``active`` False, or no
  record for the batch);
* kind and K must be the reference's, ρ within ``RHO_RTOL`` (relative, by dtype) of one of the
  reference's ρ for that outcome, and each log joint within ``LOG_TOL`` (by dtype, absolute and
  relative to its size) of the joint of the emitted tokens computed from the rows handed in, as
  given or renormalised (a verifier may renormalise narrow rows first); −inf (a joint of 0) only
  where the joint is 0.

The check is deterministic: a verifier that computes its record as the contract says never fails
it (the tolerances cover float32 and bfloat16 arithmetic on L + 1 ≤ 9 rows; a record off by one
position differs by |log q(x)| of the token it adds or drops, 0.1 or more on every built-in family
unless q(x) > 0.9); any sampled row whose record differs fails the check, and its detail shows
the first such row.  What it does not see: a record that is right on the sampled outcomes and
wrong on others (an outcome of probability ≥ 10/N is sampled with probability ≥ 1 − e^-10).
"""

from __future__ import annotations

import math

import numpy as np

from spectr_gbv.reference.contract import to_numpy
from spectr_gbv.reference.randomness import enumerate_law_draw_last

__all__ = ["RECORD_CHECK", "RHO_RTOL", "LOG_TOL", "RecordCheck", "modifies_targets", "reference_records"]

RECORD_CHECK = "Algorithm 2 record"
# ρ's relative tolerance and the log joints' tolerance (absolute + relative to |log joint|), by
# the dtype of the rows handed over: float64 arithmetic differs by ~1e-15, float32 by ~1e-7 per
# term, bfloat16 rows differ from their renormalised copies by up to ~2e-3 per row.
RHO_RTOL = {"float64": 1e-9, "float32": 1e-4, "bfloat16": 1e-2}
LOG_TOL = {"float64": 1e-9, "float32": 1e-5, "bfloat16": 1e-5}


def modifies_targets(rule) -> bool:
    """Whether the reference ``rule`` returns Algorithm 2 records (``Rule.modifies_targets``)."""
    return bool(getattr(rule, "modifies_targets", False))


def reference_records(rule, draft_tokens, draft_probs, target_probs) -> dict:
    """(τ, accepted prefix, emitted token) → the set of (kind, K, ρ) the reference rule's records
    carry on that outcome ((None, None, None): no record, as at τ = L), over every path of its
    coins with positive probability.

    Args:
        rule: a reference Rule.  draft_tokens int [K, L], draft_probs float [K, L, V],
            target_probs float [K, L+1, V]: one case's rows.
    Raises:
        ValueError: malformed rows (``Rule.prepare``).
    """
    block = rule.prepare(draft_tokens, draft_probs, target_probs)

    def outcome(src):
        v = rule.decide(block, src)
        m = v.modification
        key = (None, None, None) if m is None else (m.kind, int(m.K), float(m.rho))
        return (v.tau, v.accepted, v.last_token) + key

    law = enumerate_law_draw_last(outcome, lambda o, token: (o[0], o[1], token) + o[3:])
    table: dict = {}
    for o, p in law.items():
        if p > 0:
            table.setdefault(o[:3], set()).add(o[3:])
    return table


def _log_joint(rows: np.ndarray, path: tuple, token: int) -> float:
    """log Π_i rows[i, path_i] · rows[len(path), token], −inf where a factor is 0."""
    factors = [float(rows[i, x]) for i, x in enumerate(path)] + [float(rows[len(path), token])]
    if min(factors) <= 0.0:
        return -math.inf
    return math.fsum(math.log(f) for f in factors)


class RecordCheck:
    """The record check of one case (module doc): ``add`` each call's verdict, then ``result``.

    Args:
        rule: the reference Rule (its ``modifies_targets`` must be True).
        case: an ``oracle.certify.FixedCase`` (its ``backend_*`` rows are what the verifier got,
            its renormalised rows what the reference saw).
    """

    def __init__(self, rule, case):
        self.case = case
        self.table = reference_records(rule, case.draft_tokens, case.draft_probs, case.target_probs)
        self.rho_rtol = RHO_RTOL.get(case.backend_dtype, RHO_RTOL["bfloat16"])
        self.log_tol = LOG_TOL.get(case.backend_dtype, LOG_TOL["bfloat16"])
        self.expected: dict = {}
        self.rows = self.with_record = self.without = self.bad = 0
        self.first_bad = ""

    def _joints(self, outcome) -> tuple[list[float], list[float]]:
        """The log joints of the emitted tokens, from the rows as handed in and renormalised."""
        hit = self.expected.get(outcome)
        if hit is None:
            tau, accepted, token = outcome
            c = self.case
            k = next((k for k in range(c.K) if tuple(int(x) for x in c.draft_tokens[k, :tau]) == accepted), 0)
            lq = [_log_joint(np.asarray(rows[k], dtype=np.float64), accepted, token)
                  for rows in (c.backend_target_probs, c.target_probs)]
            lp = [_log_joint(np.asarray(rows[k], dtype=np.float64), accepted, token)
                  for rows in (c.backend_draft_probs, c.draft_probs)]
            hit = self.expected[outcome] = (lq, lp)
        return hit

    def _close(self, value: float, options: list[float]) -> bool:
        for e in options:
            if math.isinf(e) or math.isinf(value):
                if value == e:
                    return True
            elif abs(value - e) <= self.log_tol * (1.0 + abs(e)):
                return True
        return False

    def _note(self, sample: int, outcome, why: str) -> None:
        self.bad += 1
        if not self.first_bad:
            self.first_bad = f"sample {sample}, outcome (τ, accepted, token) = {outcome}: {why}"

    def add(self, modification, outcomes: list) -> None:
        """Check one call: ``modification`` the verdict's record (a BatchModification, or None)
        and ``outcomes`` its rows' (τ, accepted prefix, emitted token).  Never raises: a
        malformed record is a mismatch."""
        B = len(outcomes)
        fields = None
        if modification is not None:
            try:
                fields = {name: np.asarray(to_numpy(getattr(modification, name))).reshape(-1)
                          for name in ("rho", "log_q_joint", "log_p_joint", "active")}
                kind, K = modification.kind, int(modification.K)
                if any(a.shape != (B,) for a in fields.values()):
                    raise ValueError(f"fields of shapes {[tuple(a.shape) for a in fields.values()]}, not [{B}]")
            except Exception as err:  # a malformed record: every row of the call mismatches
                for j, o in enumerate(outcomes):
                    self._note(self.rows + j, o, f"the record is not a BatchModification of [B] fields ({err})")
                self.rows += B
                return
        for j, o in enumerate(outcomes):
            n = self.rows + j
            allowed = self.table.get(o)
            if allowed is None:  # an outcome the reference never produces: the law tests see it
                continue
            want = {a for a in allowed if a[0] is not None}
            active = fields is not None and bool(fields["active"][j])
            if not want:
                self.without += 1
                if active:
                    self._note(n, o, "an active record where the reference keeps none (τ = L)")
                continue
            self.with_record += 1
            if not active:
                self._note(n, o, "no record (" + ("the verdict's modification is None" if fields is None else
                                                  "active False") + f"); the reference's: kind, K, ρ = "
                           f"{sorted(want)[0]}")
                continue
            rho, lq, lp = (float(fields[f][j]) for f in ("rho", "log_q_joint", "log_p_joint"))
            if not any(kind == w[0] and K == w[1] and abs(rho - w[2]) <= self.rho_rtol * max(1.0, abs(w[2]))
                       for w in want):
                self._note(n, o, f"kind, K, ρ = ({kind!r}, {K}, {rho:.10g}); the reference's: "
                           + ", ".join(f"({w[0]!r}, {w[1]}, {w[2]:.10g})" for w in sorted(want)))
                continue
            eq, ep = self._joints(o)
            if not (self._close(lq, eq) and self._close(lp, ep)):
                self._note(n, o, f"log joints (q, p) = ({lq:.10g}, {lp:.10g}); those of the emitted tokens "
                           f"in the rows handed in: ({eq[0]:.10g}, {ep[0]:.10g})")
        self.rows += B

    def result(self) -> tuple[str, bool, str]:
        """(``RECORD_CHECK``, passed, detail) for ``oracle.certify.CaseResult.checks``."""
        how = ("each sampled row's record against the reference's record for its outcome (kind, K, ρ) and the "
               "log joints of its emitted tokens (oracle/record_check.py)")
        if self.bad:
            return (RECORD_CHECK, False, f"{self.bad} of {self.rows} rows carry a record other than the "
                    f"reference's; first: {self.first_bad}; checked: {how}")
        return (RECORD_CHECK, True, f"{self.with_record} records (rows with τ < L) and {self.without} rows "
                f"without (τ = L) as the reference's; checked: {how}")
