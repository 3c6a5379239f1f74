"""Certification of the registered torch verifiers: the plan of cases per rule, the run, and
the report (rows, text and markdown tables).  The CLI (``spectr-gbv certify``,
cli/certify.py) parses arguments and prints; ``spectr-gbv report`` calls
``certify_rules`` and ``markdown`` directly.

What is run (``plan``): per registered rule (``reference.rules.registry``) its fixed-draft
cases of certify/suite.py against the reference rule's exact law, the law-level
case for lossless rules, and the planted wrong rules of its base; each case through
``oracle.certify.certify_case`` with the torch verifier taking numpy rows in the case's dtype
(``suite.suite_verifier``).  Row kinds and sizes: cli/certify.py's doc; measured times:
benchmarks/CERTIFY.md and benchmarks/ENGINE_CERTIFICATE.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from spectr_gbv.oracle.outcome import verdict_word

FULL_N = 200_000
# The full run's V = 4,096 rows take more: at 2·10^5 their joint G-test pools 0.4-5.5 % of the
# mass and states δ = 0.025-0.082; at these N every lossless rule's V = 4,096 case states
# δ ≤ 0.02 (0.011-0.016; tests/certify/verifiers/test_plan_power.py).  bfloat16 rows need
# 2·10^6: their quantised probabilities leave many outcomes of one small probability, pooled
# until N·p ≥ 5 (spectr's: 0.9 % of the mass up to N ≈ 1.9·10^6).
FULL_N_ROWS = {"rows": 1_000_000, "rows_bf16": 2_000_000}
QUICK_N = {"toy": 50_000, "rows": 50_000, "rows_bf16": 50_000, "planted": 50_000, "law": 50_000,
           "law_planted": 100_000}
DEFAULT_ALPHA = 1e-6
CHUNK = {"toy": 16384, "rows": 2048, "rows_bf16": 2048, "planted": 16384, "law": 4096, "law_planted": 4096}


def planned_n(size: str, quick: bool) -> int:
    """N of a plan entry of ``size`` (``Entry.size``): ``QUICK_N`` with ``quick``, else
    ``FULL_N_ROWS`` for the V = 4,096 rows and ``FULL_N`` for the rest."""
    return QUICK_N[size] if quick else FULL_N_ROWS.get(size, FULL_N)


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
    pvalue: float
    pvalues: dict
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
    n_tests: int = 0
    detectable_delta_coarse: float = math.nan
    detectable_delta_identity: float = math.nan
    effect_tv: float = math.nan
    power: float = math.nan
    power_test: str = ""
    failed_checks: tuple = ()  # "name: detail" of the case's failed deterministic checks (oracle.certify)

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
        if self.expect_pass and self.passed and not self.informative:
            return "VACUOUS"
        return verdict_word(self.passed, self.expect_pass)

    def to_json(self) -> dict:
        def num(x):
            return None if isinstance(x, float) and not math.isfinite(x) else x

        return {
            "rule": self.rule, "case": self.case, "kind": self.kind, "reference": self.reference,
            "dtype": self.dtype, "V": self.V, "K": self.K, "L": self.L, "N": self.n,
            "alpha": self.alpha, "detectable_delta": num(self.detectable_delta),
            "detectable_delta_pooled": num(self.detectable_delta_pooled), "pooled_mass": num(self.pooled_mass),
            "n_tests": self.n_tests, "detectable_delta_coarse": num(self.detectable_delta_coarse),
            "detectable_delta_identity": num(self.detectable_delta_identity),
            "statistic": self.statistic, "pvalue": num(self.pvalue),
            "pvalues": {k: num(v) for k, v in self.pvalues.items()},
            "mean_tau": num(self.mean_tau), "exact_mean_tau": num(self.exact_mean_tau),
            "mean_ci": None if not all(map(math.isfinite, self.mean_ci)) else list(self.mean_ci),
            "zero_cell_violations": self.zero_cell_violations,
            "expected": "pass" if self.expect_pass else "fail", "passed": self.passed,
            "caught": self.caught, "ok": self.ok, "verdict": self.verdict,
            "seconds": round(self.seconds, 3), "description": self.description, "error": self.error,
            "effect_tv": num(self.effect_tv), "power": num(self.power), "power_test": self.power_test,
            "failed_checks": list(self.failed_checks),
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
    """The entries for ``rules``: per rule its fixed cases (and the law-level case of a lossless
    rule), then per rule its planted defects (``RuleSpec.planted``), then per lossy rule the
    law-level negative control (the rule against the target's first-token law: caught)."""
    from spectr_gbv.oracle.certify_cases import coverage_case, lossless_against_target, released_rule_against_target
    from spectr_gbv.reference.rules import registry

    from spectr_gbv.certify import suite

    lossless = registry.names(lossless=True)

    entries: list[Entry] = []
    for rule in rules:
        kind = "lossless" if rule in lossless else "conformance"
        single = registry.is_single_draft(rule)
        ref = f"{rule} exact law"
        entries.append(Entry(kind, rule, ref, "toy", lambda r=rule, s=single: suite.toy_cases(r, s)))
        if registry.spec(rule).coverage_seeds is not None:  # every branch of the rule's code
            entries.append(Entry(kind, rule, ref, "toy", lambda r=rule: [coverage_case(r)]))
        if registry.spec(rule).distinctive_seeds is not None:
            # the non-modifying rules are certified on their own cases (as in the tests): no
            # large_case, whose seed scan computes MDBV's exact law at V = 4,096 (slow:
            # benchmarks/ENGINE_CERTIFICATE.md) on three degenerate seeds first
            entries.append(Entry(kind, rule, ref, "toy", lambda r=rule: suite.distinctive_cases(r)[:1]))
            entries.append(Entry(kind, rule, ref, "rows", lambda r=rule: suite.distinctive_cases(r)[1:]))
        else:
            dtypes = ("float32",) if quick else ("float32", "bfloat16")
            for dt in dtypes:
                entries.append(Entry(kind, rule, ref, "rows" if dt == "float32" else "rows_bf16",
                                     lambda r=rule, d=dt, s=single: [suite.large_case(r, d, s)]))
        if rule in lossless:
            entries.append(Entry(kind, rule, "target first-token law", "law",
                                 lambda r=rule, s=single: [lossless_against_target(r, 1 if s else 2, 2)]))
    for rule in rules:
        for planted in registry.spec(rule).planted:
            entries.append(Entry("planted", planted.name, f"{rule} exact law", "planted",
                                 lambda p=planted: [suite.planted_case(p)], planted.description))
    for rule in rules:
        if rule in lossless:
            continue

        def lossy_vs_target(r=rule):
            case = released_rule_against_target(2, 2)
            case.name, case.rule = f"{r} vs target law, toy K=2 L=2", r
            return [case]

        entries.append(Entry("planted", rule, "target first-token law", "law_planted", lossy_vs_target,
                             f"{registry.spec(rule).summary}, against the target law (lossy: "
                             "docs/rules.md §2.5)"))
    return entries


# -- running -----------------------------------------------------------------------------------

TEST_NAMES = ("joint", "tau", "conditional", "mean", "coarse", "identity")
STATISTIC = {"joint": "G joint", "tau": "G law of τ", "conditional": "G token | τ, prefix",
             "mean": "z mean τ", "coarse": "G coarsened", "identity": "z identity"}


def _row(entry: Entry, case, result) -> Row:
    from spectr_gbv.oracle.certify import FirstTokenCase

    failed_checks = tuple(f"{name}: {detail}" for name, detail in result.failed_checks)
    if not result.tests_passed:  # the verifier raised or broke the contract: no test ran (a verdict)
        pvals, statistic, pvalue, n_tests = {}, "verifier output", math.nan, 0
    elif isinstance(case, FirstTokenCase):
        pvals = {"first_token": result.pvalue_joint}
        statistic, pvalue, n_tests = "G first token", result.pvalue_joint, 1
    else:
        n_tests = result.n_tests  # 4, or 6 with the coarsened and identity tests (oracle.certify)
        pvals = dict(zip(TEST_NAMES[:n_tests], (result.pvalue_joint, result.pvalue_tau,
                                                result.pvalue_conditional, result.pvalue_mean,
                                                result.pvalue_coarse, result.pvalue_identity)))
        worst = min(pvals, key=pvals.get)
        statistic, pvalue = STATISTIC[worst], min(1.0, n_tests * pvals[worst])
    return Row(entry.kind, result.rule, entry.reference, result.name, result.dtype, result.V,
               result.K, result.L, result.n, result.alpha, result.detectable_tv, statistic,
               pvalue, pvals, result.mean_tau, result.exact_mean_tau, tuple(result.mean_ci),
               result.zero_cell_violations, result.expect_pass, result.passed, result.seconds,
               entry.description, detectable_delta_pooled=result.detectable_tv_pooled,
               pooled_mass=result.pooled_mass, n_tests=n_tests,
               detectable_delta_coarse=result.detectable_tv_coarse,
               detectable_delta_identity=result.detectable_tv_identity, failed_checks=failed_checks)


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
        runs with ``case_index=j``, as in oracle.certify.certify: hashed, unrelated row seeds).  device: torch device.
        progress: called with each Row as it is done.
    Returns:
        Certification.  A case that raises (e.g. a verifier error) is an ERROR row, not ok.
    """
    import torch

    from spectr_gbv.oracle.certify import certify_case

    from spectr_gbv.certify.suite import suite_verifier

    start = time.perf_counter()
    out = Certification(mode=("quick" if quick else "full") + (f", N = {n_samples}" if n_samples else ""))
    verifiers = {}
    j = 0
    for entry in plan(rules, quick):
        n = n_samples or planned_n(entry.size, quick)
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
                result = certify_case(verifiers[key], case, n, alpha, CHUNK[entry.size], seed, case_index=j)
                row = _row(entry, case, result)
            except Exception as err:
                row = _error_row(entry, case.name, n, alpha, time.perf_counter() - t0, err)
            j += 1
            if entry.kind == "planted" and row.error is None:
                try:
                    _state_power(row, entry, n, alpha)
                except Exception as err:  # the statement is extra: its failure leaves NaN, said
                    row.power_test = f"power not computed: {type(err).__name__}: {err}"
            out.rows.append(row)
            if progress:
                progress(row)
    out.seconds = time.perf_counter() - start
    return out


def _state_power(row: Row, entry: Entry, n: int, alpha: float) -> None:
    """A planted row's effect size and power at its N (``planted_laws.planted_case_power`` for a
    planted defect's case, ``lossy_first_token_power`` for a lossy rule against the target)."""
    from spectr_gbv.certify import planted_laws
    from spectr_gbv.reference.rules import registry

    if entry.size == "planted":
        cp = planted_laws.planted_case_power(registry.planted()[entry.rule], n, alpha)
    elif entry.size == "law_planted":
        cp = planted_laws.lossy_first_token_power(entry.rule, n, alpha)
    else:
        return
    row.effect_tv, row.power = cp.effect_tv, cp.power
    row.power_test = f"{cp.test} at α = {cp.alpha:.3g}" + ("" if cp.exact else " (effect sampled)")


def power_text(power: float) -> str:
    """A power near 1 with its distance to 1 ("1 − 3e-12"; "1 − <1e-16" when it rounds to 1)."""
    if not math.isfinite(power):
        return "not computed"
    if 1 - power >= 1e-4:
        return f"{power:.4f}"
    return f"1 − {1 - power:.0e}" if 1 - power > 0 else "1 − <1e-16"


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
            f(row.detectable_delta, ".4f"), row.statistic or "—", f(row.pvalue, ".3g"), mean,
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
        "1 − α/4); on the V = 4,096 rows (laws of more than 64 outcomes) a fifth test, of the outcomes "
        "coarsened into 64 bins of nearly equal exact mass (sorted by τ, then exact probability), a sixth, "
        "the identity test of oracle.identity on the whole law, and all six at α/6; law-level cases "
        "compare the first "
        "emitted token with the target's law.  *detectable δ*: the smallest total-variation deviation "
        "of the whole outcome law detected with power 0.99 (the G-test's bound on its cells, outcomes "
        "of expected count < 5 pooled, plus the pooled mass, which the test cannot see inside; the "
        "coarsened test's δ, on the coarsened law, and the identity test's, on the whole law, are in "
        "the JSON).  *p-value*: the number of tests × "
        "the smallest p-value of the case (Bonferroni; the "
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
    planted = {r.rule: r.description + (f" — effect: TV {r.effect_tv:.4f} of the {r.power_test.split(' at ')[0]} "
                                        f"from the law it is tested against; N = {r.n:,}; power of that test "
                                        f"{power_text(r.power)} ({r.power_test})" if math.isfinite(r.power) else "")
               for r in cert.rows if r.kind == "planted" and r.description}
    if planted:
        lines += ["", "Planted wrong rules (effect size, N and the power of one test of the family at "
                  "that N: the row is caught when any test rejects, so the row's power is at least this):",
                  ""] + [f"- `{k}`: {v}" for k, v in planted.items()]
    return "\n".join(lines) + "\n"


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
