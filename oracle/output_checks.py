"""The batched contract's output and input checks, run on every call of a certification.

reference/contract.py fixes what a verdict holds besides its law: ``tau`` int [B] in [0, L],
``selected`` int [B], ``tokens`` int [B, L+1] (the τ accepted tokens, then the correction or bonus
token, padded with −1), ``num_emitted`` int [B] = τ + 1; the accepted tokens are the first τ
tokens of the selected draft; every emitted token has target probability > 0 in the row it was
emitted from.  A law test cannot see ``num_emitted`` or the padding, and sees a row that reads
another request's rows only through the 1/64 of its rows it spoils.  ``OutputChecks`` checks
every row of every call a certification makes (``oracle.harness.certify_verifier``: the mixed
batches of oracle/mixed_batches.py), as ``oracle.contract_suite.assert_contract`` checks its
fuzzed batches, and reports one named check per property (``OUTPUT_CHECK_NAMES``):

1. "output shapes and dtypes": ``tau``, ``selected``, ``num_emitted`` integer [B], ``tokens``
   integer [B, L+1];
2. "τ, num_emitted and padding": τ ∈ [0, L], num_emitted = τ + 1, −1 after the τ + 1 emitted ids;
3. "accepted tokens are drafts": where τ > 0, selected ∈ [0, K) and the τ accepted tokens are
   that draft's first τ tokens (in the rows the call handed over: a row that took another
   request's drafts fails here);
4. "emitted ids in the target's support": each accepted token and the correction or bonus token
   has target probability > 0 in the selected draft's row (draft 0's at τ = 0).

``inputs_not_modified`` is the fifth, "inputs not modified": the verifier gets writable copies
of a batch and must leave them bit for bit as they were (a verifier that writes into its inputs
corrupts the caller's rows; the certification's own calls hand read-only arrays, on which such a
verifier raises and fails its cases' "verifier output" check — this check says why).

All are deterministic: a verifier that keeps the contract never fails them (false alarm 0).  A
failure names the check, the call and the row, and for a vocabulary of at most
``REPRODUCER_MAX_V`` tokens carries Python code that rebuilds the failing row alone
(``oracle.contract_suite.reproducer``).  Results are ``oracle.contract_check.SeedCheck`` objects,
the type of every deterministic check of a certification report.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.oracle.contract_check import SeedCheck
from spectr_gbv.reference.contract import to_numpy

__all__ = ["OUTPUT_CHECK_NAMES", "INPUTS_CHECK", "REPRODUCER_MAX_V", "OutputChecks", "inputs_not_modified"]

OUTPUT_CHECK_NAMES = ("output shapes and dtypes", "τ, num_emitted and padding", "accepted tokens are drafts",
                      "emitted ids in the target's support")
INPUTS_CHECK = "inputs not modified"
REPRODUCER_MAX_V = 64  # rows of a larger vocabulary are not printed as code (K·(2L + 1)·V numbers)

_CHECK_CODE = {
    "output shapes and dtypes": "assert all(np.asarray(getattr(verdict, f)).shape == s for f, s in "
                                "(('tau', (1,)), ('selected', (1,)), ('num_emitted', (1,)), "
                                "('tokens', (1, draft_tokens.shape[2] + 1))))",
    "τ, num_emitted and padding": "t = int(verdict.tau[0])\n"
                                  "assert 0 <= t <= draft_tokens.shape[2] and int(verdict.num_emitted[0]) == t + 1\n"
                                  "assert (np.asarray(verdict.tokens)[0, t + 1:] == -1).all()",
    "accepted tokens are drafts": "t, k = int(verdict.tau[0]), int(verdict.selected[0])\n"
                                  "assert (np.asarray(verdict.tokens)[0, :t] == draft_tokens[0, k, :t]).all()",
    "emitted ids in the target's support": "t = int(verdict.tau[0]); k = int(verdict.selected[0]) if t > 0 else 0\n"
                                           "assert all(target_probs[0, k, i, int(verdict.tokens[0][i])] > 0 "
                                           "for i in range(t + 1))",
}


class OutputChecks:
    """Accumulates checks 1-4 of the module doc over the calls of one certification.

    Args:
        subject: what the calls are (for the report).
    """

    def __init__(self, subject: str = ""):
        self.subject = subject
        self.rows = 0
        self.bad = {name: 0 for name in OUTPUT_CHECK_NAMES}
        self.first: dict[str, str] = {}
        self.code: dict[str, str] = {}

    def _note(self, name: str, count: int, detail: str, rows=None, seeds=None, b: int | None = None) -> None:
        self.bad[name] += count
        if name in self.first:
            return
        self.first[name] = detail
        if rows is not None and b is not None and np.shape(rows[1])[-1] <= REPRODUCER_MAX_V:
            try:
                from spectr_gbv.oracle.contract_suite import reproducer
            except ImportError:  # hypothesis (an extra) is not installed: no code, the detail names the row
                return
            alone = tuple(np.asarray(a)[b:b + 1] for a in rows)
            self.code[name] = reproducer(alone, np.asarray(seeds)[b:b + 1], _CHECK_CODE[name])

    def add(self, verdict, rows, seeds, where: str) -> None:
        """Check one call's verdict against the rows it was handed.

        Args:
            verdict: what the verifier returned.  rows: (draft_tokens [B, K, L], draft_probs
                [B, K, L, V], target_probs [B, K, L+1, V]) as handed over (numpy).
            seeds: int64 [B], as handed over.  where: the call, for the detail ("call 3 of
                'sd toy …'").
        Never raises: a malformed verdict is a failed check.
        """
        draft_tokens, draft_probs, target_probs = rows
        B, K, L = np.shape(draft_tokens)
        V = np.shape(draft_probs)[-1]
        self.rows += B
        try:
            tau, tokens = to_numpy(verdict.tau), to_numpy(verdict.tokens)
            selected, emitted = to_numpy(verdict.selected), to_numpy(verdict.num_emitted)
        except AttributeError as err:
            self._note("output shapes and dtypes", B, f"{where}: the verdict has no {getattr(err, 'name', err)} "
                       "(the fields of reference.contract.BatchVerdict)")
            return
        for name, a, shape in (("tau", tau, (B,)), ("selected", selected, (B,)), ("num_emitted", emitted, (B,)),
                               ("tokens", tokens, (B, L + 1))):
            if a.shape != shape or not np.issubdtype(a.dtype, np.integer):
                self._note("output shapes and dtypes", B, f"{where}: {name} is {a.dtype} of shape {list(a.shape)}, "
                           f"expected integers of shape {list(shape)}")
                return
        tau, tokens = tau.astype(np.int64), tokens.astype(np.int64)
        selected, emitted = selected.astype(np.int64), emitted.astype(np.int64)
        rows_b = np.arange(B)
        in_range = (tau >= 0) & (tau <= L)
        t = np.clip(tau, 0, L)
        pos = np.arange(L + 1)[None, :]
        out = pos <= t[:, None]
        bad_tau = ~in_range | (emitted != tau + 1) | ((tokens != -1) & ~out).any(axis=1)
        if bad_tau.any():
            b = int(np.flatnonzero(bad_tau)[0])
            self._note("τ, num_emitted and padding", int(bad_tau.sum()),
                       f"{where}, row {b}: τ = {int(tau[b])}, num_emitted = {int(emitted[b])} (τ + 1 = "
                       f"{int(tau[b]) + 1} expected), tokens {tokens[b].tolist()} (−1 after the τ + 1 emitted)",
                       rows, seeds, b)
        ok_rows = in_range & ((tokens >= 0) & (tokens < V) | ~out).all(axis=1)
        k = np.where(t > 0, selected, 0)
        bad_k = ok_rows & (t > 0) & ((selected < 0) | (selected >= K))
        k = np.where((k >= 0) & (k < K), k, 0)
        drafts = np.asarray(draft_tokens)[rows_b, k]  # [B, L]
        accepted_wrong = ok_rows & ((tokens[:, :L] != drafts) & (pos[:, :L] < t[:, None])).any(axis=1)
        bad_drafts = bad_k | accepted_wrong
        if bad_drafts.any():
            b = int(np.flatnonzero(bad_drafts)[0])
            self._note("accepted tokens are drafts", int(bad_drafts.sum()),
                       f"{where}, row {b}: τ = {int(tau[b])}, selected {int(selected[b])}, accepted "
                       f"{tokens[b, :max(0, int(tau[b]))].tolist()}; its drafts {np.asarray(draft_tokens)[b].tolist()}",
                       rows, seeds, b)
        check = ok_rows & ~bad_drafts
        ids = np.where(out & check[:, None], tokens, 0)
        depth = np.broadcast_to(pos, (B, L + 1))
        probs = np.asarray(target_probs)[rows_b[:, None], k[:, None], depth, ids]  # [B, L+1]
        zero = check & ((probs <= 0) & out).any(axis=1)
        if zero.any():
            b = int(np.flatnonzero(zero)[0])
            i = int(np.flatnonzero((probs[b] <= 0) & out[b])[0])
            what = "accepted" if i < t[b] else ("bonus" if t[b] == L else "correction")
            self._note("emitted ids in the target's support", int(zero.sum()),
                       f"{where}, row {b}: the {what} token {int(tokens[b, i])} at position {i} has target "
                       f"probability {float(probs[b, i])!r} in draft {int(k[b])}'s row", rows, seeds, b)

    def results(self) -> list[SeedCheck]:
        """One SeedCheck per name of ``OUTPUT_CHECK_NAMES``: passed when no row failed it;
        ``changed`` the rows that failed, ``detail`` the first failure (or what was checked),
        ``reproducer`` code for the failing row alone where V ≤ ``REPRODUCER_MAX_V``."""
        out = []
        for name in OUTPUT_CHECK_NAMES:
            n = self.bad[name]
            if n == 0:
                out.append(SeedCheck(name, True, self.subject, self.rows, 0, 0.0,
                                     f"every row of every call checked ({self.rows:,} rows)"))
            else:
                out.append(SeedCheck(name, False, self.subject, self.rows, n, 0.0,
                                     f"{n:,} of {self.rows:,} rows fail; first: {self.first[name]} "
                                     "(reference/contract.py)", self.code.get(name, "")))
        return out


def inputs_not_modified(verifier, rows, seeds, subject: str = "") -> SeedCheck:
    """The "inputs not modified" check (module doc): the verifier gets writable copies of
    ``rows`` (draft_tokens, draft_probs, target_probs) and ``seeds``; after the call each must
    equal the original bit for bit.

    Returns:
        SeedCheck "inputs not modified" (deterministic; a verifier that raises on the valid rows
        fails it with the error, as it fails every check of those rows).
    """
    names = ("draft_tokens", "draft_probs", "target_probs", "seeds")
    originals = [np.array(a, copy=True) for a in (*rows, seeds)]
    copies = [np.array(a, copy=True) for a in originals]
    B = len(originals[0])
    try:
        verifier(*copies[:3], seeds=copies[3])
    except Exception as err:  # noqa: BLE001 - a defect of the verifier: the check's verdict
        return SeedCheck(INPUTS_CHECK, False, subject, B, 0, 0.0,
                         f"the verifier raised on writable copies of {B} valid rows: {type(err).__name__}: {err}")
    for name, before, after in zip(names, originals, copies):
        bits = (lambda a: a.view(f"u{a.itemsize}")) if before.dtype.kind == "f" else (lambda a: a)
        where = np.argwhere(bits(before) != bits(after))
        if len(where):
            first = tuple(int(x) for x in where[0])
            return SeedCheck(INPUTS_CHECK, False, subject, B, int(len(where)), 0.0,
                             f"the verifier wrote into its input {name}: {len(where):,} entries changed (first at "
                             f"index {first}: {before[first]!r} → {after[first]!r}); a verifier must leave the "
                             "caller's arrays as they were (reference/contract.py)")
    return SeedCheck(INPUTS_CHECK, True, subject, B, 0, 0.0,
                     f"writable copies of {B} rows and their seeds: unchanged after the call")
