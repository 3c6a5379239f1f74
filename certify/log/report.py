"""A log certificate as text (the CLI's report) and as JSON, in ``certify endpoint``'s shape: the
verdict line names the member that decided (``certify.endpoint.report.decided_by``), every failing
line is marked ``<- FAIL``, the JSON's ``family`` and ``reports`` have the endpoint's keys."""

from __future__ import annotations

import math
from dataclasses import asdict

from spectr_gbv.certify.endpoint.report import FAIL, decided_by, family_json, look_json
from spectr_gbv.certify.log.parse import SKIP_TEXT
from spectr_gbv.oracle.look_spending import look_alpha, spent
from spectr_gbv.oracle.sequence_scores import is_evalue

SEE = "docs/guarantees.md#certify-a-log"


def _p(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def all_deciders(cert) -> list[str]:
    """``decided_by`` of the log's tests, then the audit's failed members."""
    out = decided_by(cert)
    a = cert.audit
    if a is not None:
        if a.gaps[2]:
            out.append(f"audit: {a.gaps[2]} reported log-probs over the {1:g}-nat bound from the prefill's")
        out += [f"audit: {x}" for x in decided_by(_AuditView(a))]
        if a.shift is not None and not a.shift.passed:
            out.append(f"audit: {a.shift.name} (p {_p(a.shift.pvalue)} < alpha {a.shift.alpha:.2g})")
    return out


class _AuditView:
    """The audit's tests in the shape ``decided_by`` reads."""

    def __init__(self, a):
        self.family, self.reports, self.impossible, self.logprobs, self.dependence = a.family, a.reports, [], None, ""


def verdict_line(cert) -> str:
    line = f"verdict: {cert.verdict}"
    deciders = all_deciders(cert)
    if deciders:
        line += f" — decided by {deciders[0]}"
        if len(deciders) > 1:
            line += f"; {len(deciders) - 1} more failing line{'s' if len(deciders) > 2 else ''} marked <- FAIL below"
    elif cert.verdict == "NO DATA":
        line += " — no sampled token could be tested (see the skips below)"
    return line


def text_report(cert) -> str:
    """The certificate as lines: the verdict, what was read and skipped (with reasons), each test's
    p-value and what it detects, the report tests, throughput."""
    t, fam, plan = cert.tally, cert.family, cert.plan
    c = t.counts
    temps = ", ".join(f"T {k}: {v}" for k, v in sorted(t.temperatures.items(), key=lambda kv: float(kv[0])))
    lines = [verdict_line(cert),
             f"log {cert.source}: {c['lines']} lines, {c['samples']} samples tested, {c['records']} tokens "
             f"(alpha = {plan.alpha:g} (family), eta = {plan.tolerance:g}, --max-bound {plan.max_bound:g})"
             + ("" if cert.complete else " (INCOMPLETE: the run stopped early)"),
             f"  requests' temperatures (samples): {temps or '-'}",
             f"look {cert.look} of this certificate: the KS rows and report tests at alpha_j = alpha/(j(j+1)) = "
             f"{look_alpha(plan.alpha, cert.look):.2g} ({spent(plan.alpha, cert.look):.2g} of alpha spent by looks "
             f"1..{cert.look}), the e-values at their whole share at every look (Ville)"]
    for key, v in t.skipped.most_common():
        lines.append(f"  skipped {v} samples: {SKIP_TEXT.get(key, key)}")
    for reason, v in t.skipped_positions.most_common():
        lines.append(f"  skipped {v} positions: {reason}")
    if fam is not None:
        lines.append(f"reference: each response's reported top-k lists, transformed to each request's law + 'other' "
                     f"(mass moved inside 'other' is not seen; the smallest law has {fam.coarsened} listed cells); "
                     f"{fam.early_stops} samples have fewer tested tokens than the longest")
        for o in ("probability", "id"):
            r = fam.pooled(o)
            lines.append(f"  omnibus PIT KS, {o} order: p {_p(r.pvalue)} (alpha {r.alpha:.2g}); catches a PIT "
                         f"deviation d >= {r.detectable:.3g} (per-token TV, power 0.99)" + ("" if r.passed else FAIL))
        pos = [r for r in fam.rows if r.scope.startswith("position")]
        if pos:
            w = min(pos, key=lambda r: r.pvalue)
            bad = [r for r in pos if not r.passed]
            lines.append(f"  per position (first {len(pos) // 2}): smallest p {_p(w.pvalue)} ({w.scope}, {w.order}; "
                         f"alpha {w.alpha:.2g} each)" + (f"; {len(bad)} of {len(pos)} rows below their alpha{FAIL}"
                                                          if bad else ""))
            lines.extend(f"    {r.scope}, {r.order} order: p {_p(r.pvalue)} (alpha {r.alpha:.2g}){FAIL}"
                         for r in bad[:8])
        for d in fam.directional:
            stat = "log W" if is_evalue(d.name) else "z"
            det = (f"catches {d.unit} >= {d.detectable:.3g}" if d.unit.startswith(("|", "weight"))
                   else ("this level's truncation would be caught" if d.detectable >= 1 else
                         "a truncation at this level is not resolved at this N"))
            lines.append(f"  {d.name}: {stat} {_p(d.statistic)}, p {_p(d.pvalue)} (alpha {d.alpha:.2g}); observed "
                         f"{d.observed:.4g} vs expected {d.expected:.4g}; {det}" + ("" if d.passed else FAIL))
        if fam.impossible:
            lines.append(f"  {fam.impossible} sampled tokens reported with probability 0{FAIL}")
    for r in cert.reports:
        lines.append(f"{r.name}: {r.observed:.0f} sampled tokens outside top-k lists that claim nearly the whole law "
                     f"({r.n} such positions; at most {r.expected:.2g} expected); log W {_p(r.statistic)}, p "
                     f"{_p(r.pvalue)} (alpha {r.alpha:.2g})" + ("" if r.passed else FAIL))
    if cert.audit is not None:
        lines.extend(audit_lines(cert.audit))
    lines.append("not run on a log: the independence test (needs every sample of a prompt at once)"
                 + ("" if cert.audit is not None else "; the reported log-probs against a prefill (the reference "
                    "is the report itself: a server that reports the law it wrongly samples from is seen only by "
                    "--audit)"))
    lines.extend(f"note: {n}" for n in cert.notes)
    rate = cert.tokens_per_second
    lines.append(f"{c['records']} tokens in {cert.wall_s:.1f} s" + (f" ({rate:,.0f} tokens/s)" if math.isfinite(rate)
                                                                      and c["records"] else ""))
    lines.append(f"what certify log sees and misses: {SEE}")
    return "\n".join(lines)


def audit_lines(a) -> list[str]:
    """The audit's lines (``audit.AuditResult``), failing ones marked."""
    f = a.fraction
    lines = [f"audit against {a.url}: {a.samples} samples re-scored by prefill (lines with hash < {f:g}; "
             f"{a.skipped} not auditable, {a.errors} failed requests); misreporting on a fraction f of samples is "
             f"unseen with probability <= (1 - f)^{a.samples}" + (f" ({(1 - 0.05) ** a.samples:.2g} at f = 0.05)"
                                                                  if a.samples else "")]
    lines.extend(f"  {e}" for e in a.first_errors)
    fam = a.family
    if fam is not None:
        for d in fam.directional:
            lines.append(f"  audit {d.name}: log W {_p(d.statistic)}, p {_p(d.pvalue)} (alpha {d.alpha:.2g})"
                         + ("" if d.passed else FAIL))
        for o in ("probability", "id"):
            r = fam.pooled(o)
            lines.append(f"  audit omnibus PIT KS, {o} order: p {_p(r.pvalue)} (alpha {r.alpha:.2g})"
                         + ("" if r.passed else FAIL))
        for r in a.reports:
            lines.append(f"  audit {r.name}: log W {_p(r.statistic)}, p {_p(r.pvalue)}" + ("" if r.passed else FAIL))
    n, largest, over = a.gaps
    if n:
        lines.append(f"  audit: reported vs prefill log-probs of {n} sampled tokens: largest gap {largest:.3g} nats "
                     f"(bound 1): " + ("ok" if not over else f"{over} over the bound{FAIL}"))
    if a.shift is not None:
        s = a.shift
        lines.append(f"  audit {s.name}: {s.observed:.0f} of {s.n} gaps beyond +-{s.bias:g} nats on one side; p "
                     f"{_p(s.pvalue)} (alpha {s.alpha:.2g})" + ("" if s.passed else FAIL))
    return lines


def certificate_json(cert) -> dict:
    """The certificate as a JSON-ready dict; ``family`` and ``reports`` with ``certify endpoint``'s keys."""
    fam, t = cert.family, cert.tally
    return {
        "verdict": cert.verdict, "source": cert.source, "plan": asdict(cert.plan), "complete": cert.complete,
        "wall_s": cert.wall_s, "chunk_cpu_s": cert.chunk_cpu_s, "peak_rss_kib": cert.peak_rss_kib,
        "lines": t.counts["lines"],
        "samples": t.counts["samples"],
        "tokens": t.counts["records"],
        "tokens_per_second": cert.tokens_per_second if math.isfinite(cert.tokens_per_second) else None,
        "skipped_samples": dict(t.skipped), "skipped_positions": dict(t.skipped_positions),
        "temperatures": dict(t.temperatures), "ranges": t.ranges, "notes": cert.notes,
        "look": look_json(cert.plan.alpha, cert.look), "looks": [dict(lk) for lk in cert.looks],
        "audit": None if cert.audit is None else {
            "url": cert.audit.url, "fraction": cert.audit.fraction, "samples": cert.audit.samples,
            "failed": cert.audit.failed, "errors": cert.audit.errors, "skipped": cert.audit.skipped,
            "gaps": {"n": cert.audit.gaps[0], "largest": cert.audit.gaps[1], "over_bound": cert.audit.gaps[2]},
            "shift": None if cert.audit.shift is None else {"pvalue": cert.audit.shift.pvalue,
                                                            "alpha": cert.audit.shift.alpha,
                                                            "passed": cert.audit.shift.passed},
            "family": None if cert.audit.family is None else family_json(cert.audit.family)},
        "reports": [{"name": r.name, "statistic": r.statistic if math.isfinite(r.statistic) else None,
                     "pvalue": r.pvalue, "n": r.n, "observed": r.observed, "expected": r.expected, "alpha": r.alpha,
                     "passed": r.passed} for r in cert.reports],
        "family": None if fam is None else family_json(fam),
    }
