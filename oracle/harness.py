"""The public certification API: certify anyone's verifier against a rule's exact law.

    from spectr_gbv.oracle.harness import certify_verifier
    report = certify_verifier(my_verifier, "sd", K=1, L=3)
    assert report.ok, report.table()

``my_verifier`` is any object with the batched contract of reference/contract.py (numpy or
torch; it gets numpy arrays and per-row seeds).  It is run on the built-in case families of
``oracle.certify_cases.case_family`` (toy, prefix-dependent, V = 4,096 rows, V = 151,936 rows
of a real model's shape with their likely tokens at ids ≥ 65,536, zero target mass where drafts land, near-disjoint rows,
p = q, the rule's branch-coverage case that the project's own plan runs, one-hot draft rows,
multi-draft branches, blocks of L = 8; families without a case for the rule are skipped with a
note) and on the caller's own ``FixedCase`` rows, sampled in production batches: rows of several
cases in one call, zero-padded to one vocabulary, with greedy rows beside them, at sizes that
cross the tiles of 64, 128 and 256 rows (oracle/mixed_batches.py).  Each row's outcome is tested
against its own case's exact law given the drafts (oracle/certify.py: per case N, α, the
detectable δ, four (six on large cases) p-values and the names of the failed tests, the measured
TV, mean τ with its interval against the exact E[τ], the worst outcome cells, and the case's
deterministic checks: the verifier's output within the contract and, for a rule that modifies
later targets, its Algorithm 2 record, oracle/record_check.py).  Beside the laws, every
deterministic check of the batched contract, by name (``CONTRACT_CHECK_NAMES``, in
``report.seed_checks``): seed replay, seed dependence, seed narrowing, batch independence and the
single-request path (oracle/seed_contract.py, on a batch of rows of several cases), the output
checks over every call and the greedy rows (oracle/output_checks.py), inputs not modified; then
the input probes (oracle/input_probes.py).  ``certify_lossless`` runs the same checks.  Every
defect it detects is a failed row or check with its reason, never an exception (a failed check
comes first in ``table()``, with a reproducer where one is small enough to print: hypothesis's
shrunk batch when ``oracle.contract_suite`` reaches it); the report's ``checked`` lists what it
looked at and ``not_seen`` what it did not.  ``one_hot_drafts=True`` certifies on one-hot drafts
(``one_hot_draft_case``: n-gram speculation, vLLM's ``draft_probs=None``).  N defaults to
``oracle.defaults.DEFAULT_SAMPLES``.

``boundary_probes`` runs deterministic probes at the uniforms' extremes on a verifier that
takes ``noise=``; through an adapter that converts the rows, coins within a few ulps of their
uniform are ties.

A verifier that no registered rule describes is certified lossless without a reference law by
``certify_lossless`` (oracle/lossless.py; re-exported here):

    from spectr_gbv.oracle.harness import certify_lossless
    report = certify_lossless(my_verifier, K=1, L=3)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Sequence

from spectr_gbv.reference.contract import to_numpy
from spectr_gbv.reference.rules import registry

from spectr_gbv.oracle.certify import CertificationReport, FixedCase
from spectr_gbv.oracle.certify_cases import FAMILIES, FamilyNotApplicable, case_family, one_hot_draft_case  # noqa: F401 (one_hot_draft_case: public here)
from spectr_gbv.oracle.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES
from spectr_gbv.oracle.input_probes import INPUT_PROBES, Probe, input_probes  # noqa: F401 (Probe, INPUT_PROBES: public here)
from spectr_gbv.oracle.lossless import LosslessCaseResult, LosslessReport, ToyPair, certify_lossless  # noqa: F401 (re-exported)
from spectr_gbv.oracle.lossless import not_seen_by_probes
from spectr_gbv.oracle.mixed_batches import certify_mixed, check_batch
from spectr_gbv.oracle.output_checks import inputs_not_modified
from spectr_gbv.oracle.seed_contract import SeedCheck, check_batch_contract
from spectr_gbv.oracle.seeding import CaseSeeds


@dataclass
class HarnessReport(CertificationReport):
    """``certify_verifier``'s report: the CertificationReport of the cases run (their laws, tested
    on mixed batches), ``seed_checks`` (every deterministic check of the batched contract, each
    by name: ``CONTRACT_CHECK_NAMES``), the input probes, ``skipped``, one note per family asked
    for (by default or by name) that has no case for this rule and K (why, e.g. "branches" for a
    single-draft rule), ``not_seen``, one line per thing this certification did not look at
    (``not_seen_by``: the families the caller left out, per-request temperatures, the drafter, the
    boundary probes, the input probes when turned off; and how the Algorithm 2 record was
    checked), and ``lanes``, how the cases were batched (oracle/mixed_batches.py).  ``table()``
    prints the failed checks first, then the cases, the checks and the probes, what was checked
    (``checked``) and the notes, so a PASS lists what it checked and what it did not see."""

    skipped: list = field(default_factory=list)
    not_seen: list = field(default_factory=list)
    lanes: list = field(default_factory=list)

    @property
    def checks(self) -> dict:
        """check name → SeedCheck (the deterministic checks of ``seed_checks``)."""
        return {c.name: c for c in self.seed_checks}

    @property
    def checked(self) -> list[str]:
        """What the run checked, one line each: the cases' laws and how they were batched, the
        contract checks by name, the input probes."""
        out = [f"laws: {len(self.results)} cases, each against its own exact law, in batches of several "
               f"requests (oracle/mixed_batches.py):"] + [f"  {line}" for line in self.lanes]
        out.append("contract checks: " + ", ".join(c.name for c in self.seed_checks))
        if self.probes:
            out.append(f"input probes: {len(self.probes)} impossible inputs, each to be refused with ValueError")
        return out

    def table(self) -> str:
        failed = [c for c in self.seed_checks if not c.passed]
        head = "".join(f"FAILED CHECK {c.name}: {c.detail}\n" for c in failed)
        notes = "".join(f"\nchecked: {line}" for line in self.checked)
        notes += "".join(f"\nskipped: {note}" for note in self.skipped)
        notes += "".join(f"\nnot seen: {note}" for note in self.not_seen)
        return head + super().table() + notes


# Every deterministic check of ``certify_verifier`` (``HarnessReport.seed_checks``), in order: the
# seed and batch checks (oracle/seed_contract.py), the output checks over every call and the greedy
# rows (oracle/output_checks.py, oracle/mixed_batches.py), the inputs check.
CONTRACT_CHECK_NAMES = ("seed replay", "seed dependence", "seed narrowing", "batch independence", "single-request path",
                        "output shapes and dtypes", "τ, num_emitted and padding", "accepted tokens are drafts",
                        "emitted ids in the target's support", "greedy rows", "inputs not modified")


def not_seen_by(verifier, rule: str, families, input_checks: bool) -> list[str]:
    """What ``certify_verifier(verifier, rule, families=families, input_checks=...)`` does not
    look at, one line each (``HarnessReport.not_seen``).

    Args:
        verifier: the verifier (a ``certifies_temperatures`` attribute that is True says its
            calls carry per-request temperatures: ``VLLMLayoutAdapter``'s realistic batches).
        rule: the registered rule.  families: the families asked for (None: every family).
        input_checks: whether the input probes ran.
    """
    from spectr_gbv.oracle.certify_cases import FAMILY_SEES
    from spectr_gbv.reference.rules import get_rule

    out = []
    left = [f for f in FAMILIES if families is not None and f not in families]
    if left:
        out.append("families left out by the caller (families=): "
                   + "; ".join(f"{f} ({FAMILY_SEES.get(f, 'a built-in family')})" for f in left))
    if not getattr(verifier, "certifies_temperatures", False):
        out.append("per-request temperatures: the plain contract hands probabilities, no temperature (a sampler "
                   "that tempers, or reads another request's temperature, is certified through "
                   "gpu_backend.adapters.vllm_adapter.from_vllm_layout)")
    if get_rule(rule).modifies_targets:
        out.append("Algorithm 2 record: checked on every sampled row against the reference's record for its "
                   "outcome (oracle/record_check.py); its use by later iterations (the modified targets the caller "
                   "builds) is certify_lossless's, which carries it")
    out.append("the drafter: drafts here are fixed blocks the harness hands over; a drafter sharing noise with the "
               "verifier is certify_lossless(..., drafter=)'s")
    return out + not_seen_by_probes(input_checks)


def certify_verifier(verifier, rule: str, *, K: int | None = None, L: int = 3,
                     families: Sequence[str] | None = None, cases: Sequence[FixedCase] = (),
                     n_samples: int = DEFAULT_SAMPLES, alpha: float = DEFAULT_ALPHA, dtype: str = "float64",
                     seed: int = 0, chunk: int = 4096, progress=None,
                     one_hot_drafts: bool = False, input_checks: bool = True) -> HarnessReport:
    """Certify ``verifier`` against the exact law of the registered rule ``rule``.

    Args:
        verifier: an object with the batched contract (reference/contract.py): called as
            ``verifier(draft_tokens [B,K,L] int64, draft_probs [B,K,L,V],
            target_probs [B,K,L+1,V], seeds=int64 [B])`` with numpy arrays, returning an object
            with ``tau`` [B] and ``tokens`` [B, L+1] (numpy or tensors).
        rule: the registered rule whose law the verifier claims (``reference.rules.registry``:
            e.g. "sd" for token-level speculative sampling, "bv", "spectr").
        K: drafts (default: 1 for a single-draft rule, else 2).  L: block length ≥ 1.
        families: built-in families to run (``oracle.certify_cases.case_family``); None (the
            default): every family of ``oracle.certify_cases.FAMILIES`` — toy, prefix, large,
            vocab (V = 151,936, L = 1, at min(N, 5,000) rows), zeros, disjoint, equal, coverage (the rule's branch-coverage case, which the
            project's own plan runs), distinctive (the plan's toy distinctive case), onehot,
            branches (multi-draft), deep (L = 8) — where a family with no case for this rule
            and K is skipped with a note
            (``HarnessReport.skipped``), as is a family named here that has none; () for none.
        cases: the caller's own FixedCase rows (``FixedCase(name, rule, rule, draft_tokens
            [K, L], draft_probs [K, L, V], target_probs [K, L+1, V], backend_dtype=...)``).
        n_samples: N per case (≥ 2; default ``oracle.defaults.DEFAULT_SAMPLES`` = 20,000, the
            pytest plugin's too).  alpha: false-alarm rate per case in (0, 1) (default 1e-6).
        dtype: rows handed over as "float64", "float32" or bfloat16-rounded "bfloat16".
        seed: base seed of the cases and the verifier's per-row seeds.  chunk: rows per call.
        progress: called with each CaseResult.
        one_hot_drafts: certify on one-hot drafts (n-gram / greedy-draft speculation; vLLM's
            ``draft_probs=None``): every case, built-in and the caller's, goes through
            ``one_hot_draft_case`` (draft rows = indicators of the drafted tokens), and the
            expected law is the rule's with those rows.
        input_checks: run the input probes (``oracle.input_probes``: NaN, ±inf, negative and
            unnormalised draft rows, a drafted token of draft probability 0, NaN in a target row
            must each raise ValueError, reference/contract.py) into ``report.probes``; default True.
    Returns:
        HarnessReport (a CertificationReport): ``ok``, ``table()``, ``to_json()``, per case a
        CaseResult named "<rule> <family> …" (its deterministic ``checks``: the verifier's
        output within the contract, and for a rule that modifies later targets its Algorithm 2
        record, ``oracle.record_check``), ``seed_checks`` (every check of
        ``CONTRACT_CHECK_NAMES``: ``contract_checks``; ``report.checks`` by name), the input
        probes, ``skipped`` (the notes of the families without a case), ``lanes`` and
        ``checked`` (how the cases were batched, what was checked) and ``not_seen``
        (``not_seen_by``).  A defect it detects — a wrong law, a malformed output, a raised
        error, a wrong record, a broken seed or batch contract, a narrowed seed, a single-request
        path that draws otherwise, an input written into, an impossible input accepted — is a
        failed row or check with its reason.
    Raises:
        ValueError: unknown rule or family, bad K, L, n_samples, chunk or dtype (the caller's
            arguments; never for a defect of the verifier).
        TypeError: ``verifier`` is not callable.
        FamilyNotApplicable (a ValueError): every family asked for was skipped and no ``cases``
            were given (nothing would be certified).
    """
    K = registry.default_K(rule, 2) if K is None else K
    built, skipped = [], []
    for f in (FAMILIES if families is None else families):
        try:
            built.append(case_family(f, rule, K, L, dtype, seed))
        except FamilyNotApplicable as why:
            skipped.append(str(why))
    for case in cases:
        if not isinstance(case, FixedCase):
            raise ValueError(f"cases must hold FixedCase objects, got {type(case).__name__}")
    all_cases = [*built, *cases]
    if skipped and not all_cases:
        raise FamilyNotApplicable("no case to run: " + "; ".join(skipped))
    if one_hot_drafts:
        all_cases = [one_hot_draft_case(c) for c in all_cases]
    if not callable(verifier):
        raise TypeError(f"verifier must be callable with the batched contract, got {type(verifier).__name__}")
    run = certify_mixed(verifier, all_cases, n_samples, alpha, chunk, seed, progress)
    checks = contract_checks(verifier, all_cases, seed, run.checks)
    if any(not c.passed for c in checks):
        checks = with_reproducers(checks, verifier, rule, K)
    probes = input_probes(verifier, K, L) if input_checks else []
    return HarnessReport(run.results, checks, probes, skipped, not_seen_by(verifier, rule, families, input_checks),
                         run.lanes)


def contract_checks(verifier, cases, seed: int, run_checks) -> list[SeedCheck]:
    """Every deterministic check of ``certify_verifier`` in ``CONTRACT_CHECK_NAMES`` order: the
    five seed and batch checks (``oracle.seed_contract.check_batch_contract``) on the batch of
    ``oracle.mixed_batches.check_batch`` (rows of several cases, neighbours from different cases,
    at least 513 rows, every one re-run alone; with no case of V ≤ 64, the smallest case's row
    repeated, in calls of at most 2^27 probabilities), ``run_checks`` (the output checks over every call
    of the law families and "greedy rows": ``oracle.mixed_batches.certify_mixed``) and "inputs not
    modified" on writable copies of the check batch.

    Args:
        verifier: the batched verifier.  cases: the run's FixedCase list.  seed: base seed.
        run_checks: the checks ``certify_mixed`` returned.
    Returns:
        list of SeedCheck (empty seed and batch checks when ``cases`` is empty).
    """
    built = check_batch(cases, seed)
    if built is None:
        return list(run_checks)
    rows, collisions, subject, rng, max_rows = built
    B = len(collisions)
    seeds = CaseSeeds(seed, 0).check_seeds(B)
    fresh = CaseSeeds(seed, 0).check_seeds(B, fresh=True)
    batch = check_batch_contract(verifier, *rows, seeds, fresh, rng, collision=collisions, subject=subject,
                                 max_rows=max_rows)
    n = B if max_rows is None else max_rows  # the rows one call holds
    inputs = inputs_not_modified(verifier, tuple(a[:n] for a in rows), seeds[:n], subject)
    return [*batch, *run_checks, inputs]


REPRODUCER_EXAMPLES = 50  # hypothesis batches tried for a shrunk reproducer of a failed check


def with_reproducers(checks, verifier, rule: str, K: int) -> list[SeedCheck]:
    """``checks`` with a shrunk reproducer on the failed ones that hypothesis can reach.

    Where hypothesis is installed, ``oracle.contract_suite.assert_contract(verifier, rule, K=K)``
    runs (``REPRODUCER_EXAMPLES`` batches of at most 4 rows, V ≤ 6, L ≤ 3); the minimal failing
    batch it shrinks, as code, becomes the ``reproducer`` of the failed check of the same name
    ("batch independence" covers "single-request path" there: its rows are re-run alone).  A
    failed check it cannot reach keeps its own reproducer (a failing row alone, where small) and
    says so in its detail.  Without hypothesis the checks are returned as they are.
    """
    import dataclasses

    try:
        from spectr_gbv.oracle.contract_suite import ContractFailed, assert_contract
    except ImportError:  # hypothesis is an extra (pip install 'spectr-gbv[oracle]')
        return list(checks)
    found = None
    try:
        assert_contract(verifier, rule, K=K, max_examples=REPRODUCER_EXAMPLES)
    except ContractFailed as failure:
        found = failure
    except Exception:  # noqa: BLE001 - hypothesis could not run this verifier: no reproducer
        found = None
    out = []
    for c in checks:
        if c.passed or c.name not in CONTRACT_CHECK_NAMES:
            out.append(c)
            continue
        prop = found.property if found is not None else None
        if prop == c.name or (prop == "batch independence" and c.name == "single-request path"):
            code = (f"# shrunk by hypothesis (oracle.contract_suite.assert_contract), property {prop!r}: "
                    f"{found.detail}\n" + found.reproducer)
            out.append(dataclasses.replace(c, reproducer=code))
        else:
            out.append(dataclasses.replace(c, detail=c.detail + " (hypothesis found no failing batch of at most 4 "
                                           "rows at V ≤ 6 for this check: the batch that fails is the certification's)"))
    return out


def accepts_zero_target(case: FixedCase, tokens, tau: int) -> bool:
    """Whether the verdict (``tokens`` [L+1], τ) of ``case`` accepted a draft token of target
    probability 0: some i < τ where tokens[i] has probability 0 in the target row of the
    accepted prefix tokens[:i] (the row of a draft carrying that prefix)."""
    for i in range(min(int(tau), case.L)):
        for k in range(case.K):
            if all(int(case.draft_tokens[k, j]) == int(tokens[j]) for j in range(i + 1)):
                if case.target_probs[k, i, int(tokens[i])] == 0.0:
                    return True
                break
    return False


# (family, uniform): u → 0 makes every coin with h > 0 succeed and must still refuse a token of
# target probability 0 (h = 0); u = 1 makes every coin with h < 1 fail, so p = q rows (h = 1)
# must still be accepted in full, and a forced rejection must find a residual with mass
PROBES = (("zeros", 2.0**-53), ("zeros", 1.0), ("equal", 1.0), ("equal", 2.0**-53),
          ("toy", 2.0**-53), ("toy", 1.0))


WILDCARD = -2  # a token drawn on a rounding branch (``_TieSource``): any token id in [0, V) matches


class _TieSource:
    """MatchedSource's conventions, but a coin whose h lies within ``tol`` of its uniform is a
    tie that may go either way (replayed from ``path``; h = 0 never succeeds, so a token of
    target probability 0 is never accepted), and after a tie went against u ≤ h every draw is
    ``WILDCARD``: on that branch the verifier's rows differ from the case's by rounding, its
    residual is rounding noise (or exactly 0, where conventions differ: the reference falls
    back to the target row, vLLM's argmax of zeros takes token 0), so any token is accepted."""

    def __init__(self, uniforms, exponentials, tol: float, path: tuple):
        import numpy as np

        self.uniforms, self.exponentials, self.tol = uniforms, exponentials, tol
        self.path, self.pos, self.rounding = path, 0, False
        self._np = np

    def coin(self, h: float, key=(0, 0)) -> bool:
        h = min(1.0, max(0.0, float(h)))
        u = float(self.uniforms[key])
        exact = u <= h
        if h == 0.0 or abs(u - h) > self.tol:
            return exact
        flip = self.path[self.pos] if self.pos < len(self.path) else 0
        self.pos += 1
        if flip:
            self.rounding = True
            return not exact
        return exact

    def draw(self, weights) -> int:
        np = self._np
        if self.rounding:
            return WILDCARD
        w = np.asarray(weights, dtype=np.float64)
        with np.errstate(divide="ignore"):
            score = np.where(w > 0, np.log(np.where(w > 0, w, 1.0)) - np.log(self.exponentials), -np.inf)
        return int(np.argmax(score))


def _allowed_verdicts(rule_obj, rows, noise, tol: float) -> list[tuple[int, tuple]]:
    """(τ, tokens) of ``rule_obj`` on one row under ``noise`` for every way of resolving the
    ties of ``_TieSource`` (the first: no tie flipped, MatchedSource's verdict)."""
    block = rule_obj.prepare(rows[0][0], rows[1][0], rows[2][0])
    out, stack = [], [()]
    while stack:
        path = stack.pop()
        src = _TieSource(noise[0][0], noise[1][0], tol, path)
        v = rule_obj.decide(block, src)
        out.append((int(v.tau), tuple(int(t) for t in v.tokens)))
        for j in range(src.pos - 1, len(path) - 1, -1):  # ties met past the path: flip each
            stack.append(path + (0,) * (j - len(path)) + (1,))
    return out


def boundary_probes(verifier, rule: str, *, K: int | None = None, L: int = 3,
                    tie_ulps: int | None = None) -> list[Probe]:
    """Deterministic probes of a verifier that lets the caller inject its uniforms.

    The verifier must take ``noise=(uniforms float64 [B, K, L+1] in (0, 1], exponentials
    float64 [B, V] > 0)`` with the conventions of ``reference.randomness.MatchedSource`` (coin
    (k, i) succeeds iff u[k, i] ≤ h; the draw is the exponential race), as this project's
    verifiers do.  With every uniform at 2^-53 and at 1 on the families of ``PROBES``, its
    verdict (τ and tokens) must equal the reference rule's under the same noise, and a drafted
    token of target probability 0 must never be accepted.  Then the input probes
    (``oracle.input_probes.input_probes``: NaN, ±inf, negative and unnormalised draft rows, a
    drafted token of draft probability 0, NaN in a target row) must each raise ValueError, as
    reference/contract.py says.

    Ties (``tie_ulps``): a verifier behind an adapter that converts the rows does not see the
    case's rows exactly: ``VLLMLayoutAdapter`` hands its function logits T·log q, and
    softmax(logits / T) is q within a few ulps, so on p = q rows at u = 1 a correct float64
    verifier computes h = q/p = 1 − 2^-52 and rejects where the reference (h = 1) accepts.
    With ``tie_ulps`` = n > 0 a coin whose h lies within n·2^-53 of its uniform is a tie: the
    verdict passes if it equals the reference's for some resolution of the ties, where a
    correction drawn after a tie went against u ≤ h may be any token (its residual is rounding
    noise).  h = 0 is never a tie (softmax of a −inf logit is exactly 0), so a token of target
    probability 0 must still be refused, and the zero-mass check stays exact.  The default is
    the verifier's ``probe_tie_ulps`` attribute (16 for ``VLLMLayoutAdapter``), else 0: a
    verifier that takes the rows as given is compared exactly.

    Args:
        verifier: the batched verifier.  rule: registered rule whose law it claims.
        K: drafts (default 1 for a single-draft rule, else 2).  L: block length.
        tie_ulps: the tie tolerance in units of 2^-53 (see above); None for the verifier's own.
    Returns:
        list of Probe, one per (family, uniform) of ``PROBES``, then one per ``INPUT_PROBES``.
    Raises:
        TypeError: the verifier does not take ``noise=`` (no uniforms can be injected), or an
            adapter's wrapped function does not.
        ValueError: unknown rule, tie_ulps < 0.
    """
    import numpy as np

    from spectr_gbv.reference.rules import get_rule

    if "noise" not in inspect.signature(verifier.__call__ if not inspect.isfunction(verifier) else verifier).parameters:
        raise TypeError(f"{type(verifier).__name__} does not take noise=: its uniforms cannot be injected")
    tie_ulps = getattr(verifier, "probe_tie_ulps", 0) if tie_ulps is None else tie_ulps
    if isinstance(tie_ulps, bool) or int(tie_ulps) != tie_ulps or tie_ulps < 0:
        raise ValueError(f"tie_ulps must be an integer >= 0, got {tie_ulps!r}")
    tol = float(tie_ulps) * 2.0**-53
    K = registry.default_K(rule, 2) if K is None else K
    reference = get_rule(rule)
    probes = []
    for family, u in PROBES:
        case = case_family(family, rule, K, L)
        rows = (case.draft_tokens[None], case.draft_probs[None], case.target_probs[None])
        noise = (np.full((1, K, L + 1), u), np.random.default_rng(7).exponential(size=(1, case.V)) + 1e-3)
        want = reference(*rows, noise=noise)
        allowed = [(int(want.tau[0]), tuple(int(t) for t in want.tokens[0][: int(want.tau[0]) + 1]))]
        if tol > 0:
            allowed += _allowed_verdicts(reference, rows, noise, tol)[1:]
        got = verifier(*rows, noise=noise)
        tau, tokens = int(to_numpy(got.tau)[0]), to_numpy(got.tokens)[0]
        ok = any(tau == t and len(tokens) == L + 1 and (tokens[t + 1:] == -1).all()
                 and all(w == WILDCARD and 0 <= int(g) < case.V or int(g) == w for g, w in zip(tokens[: t + 1], toks))
                 for t, toks in allowed)
        ok = ok and not accepts_zero_target(case, tokens, tau)
        ties = (f"; with ties within {tie_ulps}·2^-53 also "
                + ", ".join(f"τ = {t}, tokens {['any' if x == WILDCARD else x for x in toks]}"
                            for t, toks in allowed[1:])) if len(allowed) > 1 else ""
        probes.append(Probe(f"{family} rows, every uniform = {u:g}", ok,
                            f"τ = {tau}, tokens {tokens.tolist()}; reference τ = {int(want.tau[0])}, "
                            f"tokens {want.tokens[0].tolist()}{ties}"))
    return probes + input_probes(verifier, K, L)
