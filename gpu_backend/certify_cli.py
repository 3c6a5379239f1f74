"""``spectr-gbv certify``: the torch verifiers certified against the reference's exact laws.

    spectr-gbv certify [--rules R,…] [--quick] [--json FILE] [--markdown FILE]
                       [--samples N] [--alpha A] [--seed S] [--device D] [--threads T]

Every rule of the registry (``reference.rules.registry``; or the ``--rules`` subset) is run by
oracle.certify (batched samples with the verifier's own seeded randomness, a G-test of the
joint outcome (τ, accepted prefix, emitted token), of the law of τ, of the emitted token given
(τ, prefix), and the mean of τ against the exact E[τ], each at α/4) on the cases of
gpu_backend/certify_suite.py.  Three kinds of row:

* ``lossless`` — a rule registered as lossless (``reference.rules.registry``): fixed-draft cases against the
  reference rule's exact law given the drafts (toy V = 3 float32 and V = 4 bfloat16; random rows
  at V = 4,096 in float32, and in the full run also in bfloat16; the non-modifying rules kseq_bv,
  traversal and mdbv take their own distinctive toy and V = 4,096 cases instead of the generic
  V = 4,096 ones, as in the tests: MDBV's reference law costs 10-50 s per case there), plus the
  law-level check (fresh toy drafts every sample, the first emitted token against the target's
  law, K = L = 2; K = 1 for single-draft rules).  Must pass.  The greedy rules with Algorithm 2
  (gbv, spectr_gbv_fixed, kseq_gbv) are checked on one iteration's (τ, prefix, token), as the
  reference computes it; their modification record is not part of the outcome.
* ``conformance`` — a registered rule the reference does not list as lossless (spectr_gbv, the
  released SpecTr-GBV, and spectr_gbv_fixed: docs/rules.md §2.5, lossy for K ≥ 2 with either
  residual): the same fixed-draft cases against its OWN exact law.  Must pass.
* ``planted`` — wrong rules that must be caught: the planted torch variants of
  certify_suite.PLANTED (shared uniform in BV, first-failure stopping in BV and GBV, ρ = 1 in
  K-SEQ and K-SEQ-GBV at K = 2) against the correct rule's exact law, and the released
  SpecTr-GBV (and spectr_gbv_fixed) against the target's first-token law at K = L = 2.
  A planted row runs when its base rule is selected.

Each row reports N, α, the smallest total-variation deviation of the whole outcome law detected
with power 0.99 (``detectable δ``: the joint G-test's bound on its pooled cells plus the pooled
mass, oracle.stats.GTestResult.detectable_tv_law), the deciding test and the case's p-value
(Bonferroni: 4 × the smallest of its four p-values, the single first-token test's own
p-value), mean τ with its confidence interval against the exact E[τ], and the verdict.
Exit status 0 only when every lossless and conformance row passes and every planted row is
caught; 1 otherwise; 2 for bad arguments (e.g. an unknown rule).

Sizes: full run N = 2·10^5 per case at α = 1e-6.  ``--quick``: N = 5·10^4 per case (10^5 for
the law-level planted ones), no bfloat16 rows at V = 4,096; every registered rule and every
planted defect is still covered.  ``--samples`` sets N for every case (a law-level planted case
needs N ≳ 3·10^4 to be caught: its first-token TV is 0.024).

Measured on this shared 2-core CPU (1 torch thread, 10 registered rules, 2026-11-29):
``--quick`` 48 cases, 91 s wall (89 s in the run, of which 72 s sampling and testing, the rest
building cases); the full run 55 cases, 338 s wall (detectable TV ≤ 0.011 on the toy and
law-level cases, ≤ 0.028 on the V = 4,096 rows before the pooled mass), beside another job
using the second core.  Since 2026-11-30 δ includes the pooled mass: the full run then gave
δ ≤ 0.011 on the toy and law-level cases and 0.025-0.082 on the V = 4,096 rows (pooled mass
0.4-5.5 %), 55 cases in 470 s beside other jobs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

FULL_N = 200_000
QUICK_N = {"toy": 50_000, "rows": 50_000, "planted": 50_000, "law": 50_000, "law_planted": 100_000}
DEFAULT_ALPHA = 1e-6
CHUNK = {"toy": 16384, "rows": 2048, "planted": 16384, "law": 4096, "law_planted": 4096}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "certify",
        help="certify the torch verifiers against the reference's exact laws",
        description="Runs every registered torch verifier on fixed-draft and law-level cases, "
        "compares its outcomes with the reference's exact law (G-tests and the mean of tau), and "
        "checks that planted wrong rules are caught.  Prints per rule and case: N, alpha, the "
        "detectable TV, the p-value and the verdict.  Exit status 0 only when every lossless rule "
        "passes and every planted wrong rule is caught.",
    )
    from reference.cli_args import (add_json_flag, int_at_least, output_file, positive_int, seed_int,
                                    unit_interval_open)

    p.add_argument("--rules", default=None,
                   help="comma-separated registered rules (default: all); planted wrong rules run "
                   "with their base rule")
    p.add_argument("--quick", action="store_true",
                   help="smaller N and fewer cases (every rule and planted defect still covered; "
                   "under 5 minutes on 2 CPU cores)")
    p.add_argument("--samples", type=int_at_least(2, " (the mean test needs 2 samples)"), default=None,
                   help=f"N for every case (default {FULL_N}; --quick: per kind, see the docs)")
    p.add_argument("--alpha", type=unit_interval_open, default=DEFAULT_ALPHA,
                   help=f"false-alarm rate per case, in (0, 1) (default {DEFAULT_ALPHA:g})")
    p.add_argument("--seed", type=seed_int, default=0, help="base seed of the verifiers' noise (>= 0)")
    p.add_argument("--device", default="cpu", help="torch device of the verifiers (default cpu)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch intra-op threads (default 1: small batched ops are faster on one)")
    add_json_flag(p, "the rows")
    p.add_argument("--markdown", type=output_file, default=None, help="write the report as markdown to FILE")
    p.set_defaults(func=run, check=check)


# -- plan --------------------------------------------------------------------------------------

@dataclass
class Entry:
    """One case to run: ``kind`` lossless / conformance / planted, ``size`` a QUICK_N key,
    ``reference`` the law it is checked against, ``build`` makes the oracle.certify case."""

    kind: str
    rule: str
    reference: str
    size: str
    build: object
    description: str = ""


@dataclass
class Row:
    """One certified case (JSON: ``to_json``)."""

    kind: str
    rule: str
    reference: str
    case: str
    dtype: str
    V: int
    K: int
    L: int
    n: int
    alpha: float
    detectable_delta: float
    statistic: str
    p_value: float
    p_values: dict
    mean_tau: float
    exact_mean_tau: float
    mean_ci: tuple
    zero_cell_violations: int
    expect_pass: bool
    passed: bool
    seconds: float
    description: str = ""
    error: str | None = None
    detectable_delta_pooled: float = math.nan
    pooled_mass: float = math.nan

    @property
    def caught(self) -> bool | None:
        return None if self.expect_pass else not self.passed

    @property
    def informative(self) -> bool:
        """A passing row certifies something only if its detectable δ is below 1 (at δ ≥ 1 no
        deviation is guaranteed to be detected, e.g. with a few dozen samples)."""
        return not (self.expect_pass and not self.detectable_delta < 1.0)

    @property
    def ok(self) -> bool:
        return self.error is None and self.passed == self.expect_pass and self.informative

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "ERROR"
        if self.expect_pass:
            return ("PASS" if self.informative else "VACUOUS") if self.passed else "FAIL"
        return "CAUGHT" if not self.passed else "MISSED"

    def to_json(self) -> dict:
        def num(x):
            return None if isinstance(x, float) and not math.isfinite(x) else x

        return {
            "rule": self.rule, "case": self.case, "kind": self.kind, "reference": self.reference,
            "dtype": self.dtype, "V": self.V, "K": self.K, "L": self.L, "N": self.n,
            "alpha": self.alpha, "detectable_delta": num(self.detectable_delta),
            "detectable_delta_pooled": num(self.detectable_delta_pooled), "pooled_mass": num(self.pooled_mass),
            "statistic": self.statistic, "p_value": num(self.p_value),
            "p_values": {k: num(v) for k, v in self.p_values.items()},
            "mean_tau": num(self.mean_tau), "exact_mean_tau": num(self.exact_mean_tau),
            "mean_ci": None if not all(map(math.isfinite, self.mean_ci)) else list(self.mean_ci),
            "zero_cell_violations": self.zero_cell_violations,
            "expected": "pass" if self.expect_pass else "fail", "passed": self.passed,
            "caught": self.caught, "ok": self.ok, "verdict": self.verdict,
            "seconds": round(self.seconds, 3), "description": self.description, "error": self.error,
        }


@dataclass
class Certification:
    rows: list[Row] = field(default_factory=list)
    mode: str = "full"
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)


def parse_rules(text: str | None, known: tuple[str, ...]) -> list[str]:
    """The ``--rules`` list (registry order kept for the default).

    Raises:
        ValueError: empty list, or a name not in ``known`` (the message lists the known ones).
    """
    if text is None:
        return list(known)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("--rules: give at least one rule name")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--rules: unknown rule(s) {', '.join(unknown)}; registered rules: {', '.join(known)}")
    return list(dict.fromkeys(names))


def plan(rules: list[str], quick: bool) -> list[Entry]:
    """The entries for ``rules``: per rule its fixed cases, then the law-level and planted ones."""
    from oracle.certify_cases import lossless_against_target, released_rule_against_target
    from reference.rules import registry

    from . import certify_suite as suite

    lossless = registry.names(lossless=True)

    entries: list[Entry] = []
    for rule in rules:
        kind = "lossless" if rule in lossless else "conformance"
        single = registry.is_single_draft(rule)
        ref = f"{rule} exact law"
        entries.append(Entry(kind, rule, ref, "toy", lambda r=rule, s=single: suite.toy_cases(r, s)))
        if rule in suite.TOY_SEED:
            # the non-modifying rules are certified on their own cases (as in the tests): no
            # large_case, whose seed scan computes MDBV's exact law at V = 4,096 (10-50 s each)
            # on three degenerate seeds first
            entries.append(Entry(kind, rule, ref, "toy", lambda r=rule: suite.distinctive_cases(r)[:1]))
            entries.append(Entry(kind, rule, ref, "rows", lambda r=rule: suite.distinctive_cases(r)[1:]))
        else:
            dtypes = ("float32",) if quick else ("float32", "bfloat16")
            for dt in dtypes:
                entries.append(Entry(kind, rule, ref, "rows",
                                     lambda r=rule, d=dt, s=single: [suite.large_case(r, d, s)]))
        if rule in lossless:
            entries.append(Entry(kind, rule, "target first-token law", "law",
                                 lambda r=rule, s=single: [lossless_against_target(r, 1 if s else 2, 2)]))
    for planted in suite.PLANTED.values():
        if planted.base in rules:
            entries.append(Entry("planted", planted.name, f"{planted.base} exact law", "planted",
                                 lambda p=planted: [p.case()], planted.description))
    if "spectr_gbv" in rules:
        entries.append(Entry("planted", "spectr_gbv", "target first-token law", "law_planted",
                             lambda: [released_rule_against_target(2, 2)],
                             "released SpecTr-GBV against the target law (docs/rules.md §2.5)"))
    if "spectr_gbv_fixed" in rules:
        def fixed_vs_target():
            case = released_rule_against_target(2, 2)
            case.name, case.rule = "spectr_gbv_fixed vs target law, toy K=2 L=2", "spectr_gbv_fixed"
            return [case]

        entries.append(Entry("planted", "spectr_gbv_fixed", "target first-token law", "law_planted",
                             fixed_vs_target,
                             "SpecTr-GBV with the consistent residual and Algorithm 2 against the "
                             "target law (also lossy: docs/rules.md §2.5)"))
    return entries


# -- running -----------------------------------------------------------------------------------

TEST_NAMES = ("joint", "tau", "conditional", "mean")
STATISTIC = {"joint": "G joint", "tau": "G law of τ", "conditional": "G token | τ, prefix",
             "mean": "z mean τ"}


def _row(entry: Entry, case, result) -> Row:
    from oracle.certify import FirstTokenCase

    if isinstance(case, FirstTokenCase):
        pvals = {"first_token": result.pvalue_joint}
        statistic, p_value = "G first token", result.pvalue_joint
    else:
        pvals = dict(zip(TEST_NAMES, (result.pvalue_joint, result.pvalue_tau,
                                      result.pvalue_conditional, result.pvalue_mean)))
        worst = min(pvals, key=pvals.get)
        statistic, p_value = STATISTIC[worst], min(1.0, 4.0 * pvals[worst])
    return Row(entry.kind, result.rule, entry.reference, result.name, result.dtype, result.V,
               result.K, result.L, result.n, result.alpha, result.detectable_tv, statistic,
               p_value, pvals, result.mean_tau, result.exact_mean_tau, tuple(result.mean_ci),
               result.zero_cell_violations, result.expect_pass, result.passed, result.seconds,
               entry.description, detectable_delta_pooled=result.detectable_tv_pooled,
               pooled_mass=result.pooled_mass)


def _error_row(entry: Entry, name: str, n: int, alpha: float, seconds: float, err: Exception) -> Row:
    nan = math.nan
    return Row(entry.kind, entry.rule, entry.reference, name, "", 0, 0, 0, n, alpha, nan, "", nan, {},
               nan, nan, (nan, nan), 0, entry.kind != "planted", False, seconds, entry.description,
               error=f"{type(err).__name__}: {err}")


def certify_rules(rules: list[str], quick: bool = False, n_samples: int | None = None,
                  alpha: float = DEFAULT_ALPHA, seed: int = 0, device: str = "cpu",
                  progress=None) -> Certification:
    """Run the plan for ``rules``.

    Args:
        rules: registered rule names.  quick: the --quick sizes.  n_samples: N for every case
        (None: the mode's sizes).  alpha: per-case false-alarm rate.  seed: base seed (case j
        uses seed + 1,000,003·j, as oracle.certify.certify).  device: torch device.
        progress: called with each Row as it is done.
    Returns:
        Certification.  A case that raises (e.g. a verifier error) is an ERROR row, not ok.
    """
    import torch

    from oracle.certify import certify_case

    from .certify_suite import suite_verifier

    start = time.perf_counter()
    out = Certification(mode=("quick" if quick else "full") + (f", N = {n_samples}" if n_samples else ""))
    verifiers = {}
    j = 0
    for entry in plan(rules, quick):
        n = n_samples or (QUICK_N[entry.size] if quick else FULL_N)
        t0 = time.perf_counter()
        try:
            cases = entry.build()
        except Exception as err:  # a broken case builder fails its rule, not the run
            row = _error_row(entry, f"{entry.rule} ({entry.size} cases)", n, alpha,
                             time.perf_counter() - t0, err)
            out.rows.append(row)
            if progress:
                progress(row)
            continue
        for case in cases:
            t0 = time.perf_counter()
            key = (case.rule, case.backend_dtype)
            try:
                if key not in verifiers:
                    verifiers[key] = suite_verifier(case.rule, getattr(torch, case.backend_dtype), device)
                result = certify_case(verifiers[key], case, n, alpha, CHUNK[entry.size],
                                      seed + 1_000_003 * j)
                row = _row(entry, case, result)
            except Exception as err:
                row = _error_row(entry, case.name, n, alpha, time.perf_counter() - t0, err)
            j += 1
            out.rows.append(row)
            if progress:
                progress(row)
    out.seconds = time.perf_counter() - start
    return out


# -- output ------------------------------------------------------------------------------------

HEADERS = ("kind", "rule", "case", "dtype", "N", "α", "detectable δ", "statistic", "p-value",
           "mean τ [CI]", "exact E[τ]", "expected", "verdict", "caught")


def _case_label(row: Row) -> str:
    name = row.case
    return name[len(row.rule) + 1:] if name.startswith(row.rule + " ") else name


def _cells(row: Row) -> tuple[str, ...]:
    def f(x, spec):
        return "—" if not math.isfinite(x) else format(x, spec)

    if math.isfinite(row.mean_tau) and all(map(math.isfinite, row.mean_ci)):
        mean = f"{row.mean_tau:.4f} [{row.mean_ci[0]:.4f}, {row.mean_ci[1]:.4f}]"
    else:
        mean = f(row.mean_tau, ".4f")
    caught = "" if row.caught is None else ("yes" if row.caught else "NO")
    return (row.kind, row.rule, _case_label(row), row.dtype, str(row.n), f"{row.alpha:g}",
            f(row.detectable_delta, ".4f"), row.statistic or "—", f(row.p_value, ".3g"), mean,
            f(row.exact_mean_tau, ".4f"), "pass" if row.expect_pass else "fail", row.verdict, caught)


def text_table(rows: list[Row]) -> str:
    body = [HEADERS] + [_cells(r) for r in rows]
    widths = [max(len(line[c]) for line in body) for c in range(len(HEADERS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for r in rows:
        cells = list(_cells(r))
        if not r.ok:
            cells[12] = f"**{cells[12]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def summary(cert: Certification) -> str:
    def count(kind):
        rows = [r for r in cert.rows if r.kind == kind]
        return sum(r.ok for r in rows), len(rows)

    (lp, ln), (cp, cn), (pc, pn) = count("lossless"), count("conformance"), count("planted")
    return (f"{len(cert.rows)} cases in {cert.seconds:.0f} s ({cert.mode}): lossless {lp}/{ln} passed, "
            f"conformance {cp}/{cn} passed, planted {pc}/{pn} caught — "
            f"{'CERTIFIED' if cert.ok else 'NOT CERTIFIED'}")


def markdown(cert: Certification, command: str) -> str:
    """The report as markdown without a top-level title (``spectr-gbv report`` embeds it)."""
    from datetime import datetime, timezone

    lines = [
        f"Generated by `{command}` on {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "The torch verifiers (gpu_backend.verifiers) sampled with their own seeded randomness and "
        "compared with the reference's exact law (oracle.certify): per case a G-test of the joint "
        "outcome (τ, accepted prefix, emitted token), of the law of τ, of the token given (τ, prefix), "
        "and the mean of τ against the exact E[τ], each at α/4 (the interval of mean τ has confidence "
        "1 − α/4); law-level cases compare the first "
        "emitted token with the target's law.  *detectable δ*: the smallest total-variation deviation "
        "of the whole outcome law detected with power 0.99 (the G-test's bound on its cells, outcomes "
        "of expected count < 5 pooled, plus the pooled mass, which the test cannot see inside).  *p-value*: 4 × the smallest p-value of the case (Bonferroni; the "
        "first-token test's own p-value), named by *statistic*.  *lossless* rows must pass; "
        "*conformance* rows (rules the reference does not list as lossless) must match their own "
        "exact law; *planted* rows are wrong rules that must be caught.",
        "",
        f"**{summary(cert)}**",
        "",
        markdown_table(cert.rows),
    ]
    errors = [r for r in cert.rows if r.error]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {r.case}: `{r.error}`" for r in errors]
    planted = {r.rule: r.description for r in cert.rows if r.kind == "planted" and r.description}
    if planted:
        lines += ["", "Planted wrong rules:", ""] + [f"- `{k}`: {v}" for k, v in planted.items()]
    return "\n".join(lines) + "\n"


def check(args: argparse.Namespace) -> None:
    """The rule names against the registry and the device (ranges are checked by the parser)."""
    import torch

    from reference.cli_args import UsageError, first_line

    from reference.rules import registry

    try:
        args.rule_list = parse_rules(args.rules, registry.names())
    except ValueError as err:
        raise UsageError(str(err)) from None
    try:
        device = torch.device(args.device)
    except (RuntimeError, AssertionError, ValueError) as err:
        raise UsageError(f"--device {args.device!r} is not usable: {first_line(err)}") from None
    why = device_unusable(device, torch)
    if why is None:
        try:
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError, ValueError) as err:
            why = first_line(err)
    if why is not None:
        raise UsageError(f"--device {args.device!r} is not usable: {why}")
    args.torch_device = device


def device_unusable(device, torch) -> str | None:
    """Why ``device`` cannot run the verifiers (None when it can): only cpu, cuda[:N] and mps,
    when torch reports them available (``meta`` has no data; other backends are untested)."""
    if device.type == "cpu":
        return None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "torch reports no CUDA device available"
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            return f"cuda:{device.index} does not exist ({count} CUDA device(s))"
        return None
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        return None if mps is not None and mps.is_available() else "torch reports MPS not available"
    return f"device type {device.type!r} is not supported (use cpu, cuda[:N] or mps)"


def run(args: argparse.Namespace) -> int:
    import torch

    from reference.cli_args import text_stream, write_json

    if getattr(args, "rule_list", None) is None:  # check() not run (a direct call)
        check(args)
    rules, device = args.rule_list, args.torch_device
    torch.set_num_threads(args.threads)

    def progress(row: Row):
        extra = f"  {row.error}" if row.error else ""
        print(f"certify: {row.verdict:6s} {row.case}  N={row.n}  p={row.p_value:.3g}  "
              f"δ={row.detectable_delta:.4f}  {row.seconds:.1f}s{extra}", file=sys.stderr, flush=True)

    cert = certify_rules(rules, args.quick, args.samples, args.alpha, args.seed, str(device), progress)
    out = text_stream(args)
    print(text_table(cert.rows), file=out)
    print(file=out)
    print(summary(cert), file=out)
    command = _command(args)
    write_json(args.json_file, [r.to_json() for r in cert.rows])
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(markdown(cert, command))
    return 0 if cert.ok else 1


def _command(args: argparse.Namespace) -> str:
    parts = ["spectr-gbv certify"]
    if args.rules:
        parts.append(f"--rules {args.rules}")
    if args.quick:
        parts.append("--quick")
    if args.samples is not None:
        parts.append(f"--samples {args.samples}")
    if args.alpha != DEFAULT_ALPHA:
        parts.append(f"--alpha {args.alpha:g}")
    if args.seed:
        parts.append(f"--seed {args.seed}")
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    return " ".join(parts)
