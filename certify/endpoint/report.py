"""A deployment certificate as text (the CLI's report) and as JSON."""

from __future__ import annotations

import math

from spectr_gbv.oracle.sequence_scores import is_evalue

SEE = "docs/guarantees.md#certify-a-deployment"
FAIL = "  <- FAIL"


def _p(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _stat(d) -> str:
    return "log W" if is_evalue(d.name) else "z"  # the e-value tests report log W


def decided_by(cert) -> list[str]:
    """The members of the certificate's tests that failed, most decisive first, as short phrases:
    what fails without a p-value (impossible samples or tokens, a reported log-probability over its
    bound) first, then each failed test of the family and each failed report test by p / α
    (smallest first).  Empty when nothing failed."""
    out = []
    if getattr(cert, "dependence", ""):
        out.append(f"samples dependent ({cert.duplicates[0]} identical pairs for different seeds)" if cert.duplicates[0]
                   and "identical samples" in cert.dependence else "samples dependent (shared prefixes)")
    if cert.impossible:
        out.append(f"{len(cert.impossible)} impossible samples")
    fam = cert.family
    if fam is not None and fam.impossible:
        out.append(f"{fam.impossible} tokens of probability 0 under the reference")
    if cert.logprobs is not None and not cert.logprobs.passed:
        out.append(f"reported log-probs: {cert.logprobs.over} over the {cert.logprobs.bound:g}-nat bound")
    ranked = []
    if fam is not None:
        ranked += [(r.pvalue / r.alpha, f"omnibus PIT KS ({'pooled' if r.scope == 'all' else r.scope}, {r.order} "
                    f"order; p {_p(r.pvalue)} < alpha {r.alpha:.2g})") for r in fam.rows if not r.passed]
        ranked += [(d.pvalue / d.alpha, f"{d.name} ({_stat(d)} {_p(d.statistic)}, p {_p(d.pvalue)} < alpha "
                    f"{d.alpha:.2g})") for d in fam.directional if not d.passed]
    ranked += [(r.pvalue / r.alpha, f"{r.name} (p {_p(r.pvalue)} < alpha {r.alpha:.2g})")
               for r in getattr(cert, "reports", ()) if not r.passed]
    out += [name for _, name in sorted(ranked, key=lambda x: x[0])]
    au = getattr(cert, "audit", None)  # certify endpoint's ``run.AuditCheck`` (certify log reports its own audit)
    if au is not None and hasattr(au, "unseen_fraction") and not au.passed:
        out += [f"the audit: {line}" for line in _audit_failures(au)]
    return out


def _audit_failures(au) -> list[str]:
    """The audit's failed members, as short phrases."""
    out = []
    if au.logprobs is not None and not au.logprobs.passed:
        out.append(f"reported log-probs of sampled tokens vs prefill: {au.logprobs.over} over the "
                   f"{au.logprobs.bound:g}-nat bound")
    if au.lists[2]:
        out.append(f"reported top-k lists vs prefill: {au.lists[2]} entries over the bound")
    for r in au.reports:
        if not r.passed:
            out.append(f"{r.name} (p {_p(r.pvalue)} < alpha {r.alpha:.2g})")
    if au.family is not None and not au.family.passed:
        bad = [d for d in au.family.directional if not d.passed] + [r for r in au.family.rows if not r.passed]
        out.append("the family on the prefill's laws (" + ", ".join(
            getattr(d, "name", None) or f"omnibus PIT KS {d.scope}" for d in bad[:3]) + ")")
    return out


def audit_lines(au) -> list[str]:
    """The audit of ``--reference reported`` as report lines (its power: misreporting on a fraction
    f of the samples is unseen with probability ≤ (1 − f)^m)."""
    if au is None or not hasattr(au, "unseen_fraction"):
        return []
    m = au.samples
    lines = [f"audit ({au.fraction:.0%} of the samples, at least 8): {m} samples re-scored by prefill; misreporting "
             f"on a fraction f of the samples goes unseen with probability <= (1 - f)^{m}"
             + (f" (f = {au.unseen_fraction:.2f}: 0.05)" if m else "")
             + ("" if au.passed else FAIL)]
    if au.family is not None:
        fam = au.family
        worst = min(list(fam.rows) + list(fam.directional), key=lambda r: r.pvalue / r.alpha)
        lines.append(f"  the family on the prefill's laws: {'pass' if fam.passed else 'FAIL'} ({fam.n_tokens} tokens; "
                     f"smallest p/alpha {worst.pvalue / worst.alpha:.2g})" + ("" if fam.passed else FAIL))
    if au.logprobs is not None:
        lp = au.logprobs
        lines.append(f"  reported vs prefilled log-probs of the sampled tokens: {lp.n} tokens, median gap "
                     f"{lp.median:.2g}, largest {lp.largest:.3g} nats (bound {lp.bound:g})"
                     + ("" if lp.passed else f": {lp.over} over{FAIL}"))
    n, largest, over = au.lists
    if n:
        lines.append(f"  reported vs prefilled top-k lists: {n} entries, largest gap {largest:.3g} nats"
                     + ("" if not over else f": {over} over the bound{FAIL}"))
    lines.extend("  " + _report_line(r) for r in au.reports)
    return lines


def _verdict_line(cert) -> str:
    line = f"verdict: {cert.verdict}" + (f" — {cert.refused}" if cert.refused else "")
    deciders = decided_by(cert)
    if deciders:
        line += f" — decided by {deciders[0]}"
        if len(deciders) > 1:
            line += f"; {len(deciders) - 1} more failing line{'s' if len(deciders) > 2 else ''} marked <- FAIL below"
    elif getattr(cert, "sequence", None) and cert.sequence.get("resolution"):
        line += " — " + resolved_phrase(cert)
    return line


_ENDED = {"resolved": "every target resolved", "max-samples": "the sample budget (--max-samples) ended it",
          "max-time": "the time budget (--max-time) ended it", "user": "stopped by the user",
          "stopped": "the run stopped", "fail": "a look failed"}


def resolved_phrase(cert) -> str:
    """What a sequential plan's last look resolved and did not (power 0.99), and why it ended."""
    from spectr_gbv.certify.endpoint.sequential import describe

    seq = cert.sequence
    ok, bad = describe(seq["resolution"])
    out = f"resolved at power 0.99: {ok or 'none of the targets'}"
    if bad:
        out += f"; NOT resolved: {bad}"
        if seq.get("needed"):
            out += f" (the pilot puts every target at about {seq['needed']} samples)"
        elif seq.get("needed") is None:
            out += " (the pilot puts no sample count within reach)"
    return out + f"; {_ENDED.get(seq['stopped'], seq['stopped'])} after {cert.samples} samples"


def _n_planned(cert) -> str:
    plan = cert.plan
    if getattr(plan, "sequential", False):
        return f"{plan.n_samples} (pilot) to {plan.max_samples} (sequential)"
    return str(plan.n_samples)


def _sequence_line(cert) -> str | None:
    seq = getattr(cert, "sequence", None)
    if not seq:
        return None
    plan = cert.plan
    made = ", ".join(str(n) for n in seq["tested"]) or "none"
    budget = f"--max-samples {plan.max_samples}" + (f", --max-time {plan.max_time_s:g} s" if plan.max_time_s else "")
    return (f"sequential plan: looks at {', '.join(str(n) for n in seq['looks'])} samples ({budget}); looks made at "
            f"{made}; {_ENDED.get(seq['stopped'], seq['stopped'] or 'running')}")


def _look_line(cert) -> str | None:
    """Which look of the certificate this is, and what it spends (``oracle.look_spending``)."""
    from spectr_gbv.oracle.look_spending import look_alpha, spent

    j = getattr(cert, "look", 0)
    if not j:
        return None
    a = cert.plan.alpha
    return (f"look {j} of this certificate: the omnibus rows and report tests at alpha_j = alpha/(j(j+1)) = "
            f"{look_alpha(a, j):.2g} ({spent(a, j):.2g} of alpha spent by looks 1..{j}), the directional e-values "
            "at their whole share at every look (Ville); false alarm <= alpha over any number of looks")


def text_report(cert) -> str:
    """The certificate as a few aligned lines: the verdict and the family member that decided it
    (``decided_by``), the plan, each test's p-value and detectable deviation (every failing line
    marked "<- FAIL"), the reported log-probabilities, seeds, errors and notes."""
    plan, fam = cert.plan, cert.family
    lines = [_verdict_line(cert),
             f"server {cert.server}  model {cert.model or '-'}  reference {cert.reference}",
             f"plan: N = {_n_planned(cert)} samples × {plan.n_new} tokens, T = {plan.temperature:g}, "
             f"alpha = {plan.alpha:g} (family), eta = {fam.tolerance if fam is not None else plan.tolerance:g}"
             f"{' (auto)' if plan.auto_tolerance else ''}, concurrency {plan.concurrency}; "
             f"tested {cert.samples} samples" + ("" if cert.complete else " (INCOMPLETE: the run stopped early)")]
    if _sequence_line(cert):
        lines.append(_sequence_line(cert))
    if _look_line(cert):
        lines.append(_look_line(cert))
    if fam is not None:
        coarse = ("whole laws" if fam.coarsened > plan.k else
                  f"top-{fam.coarsened} laws + 'other' (mass moved inside 'other' is not seen)")
        lines.append(f"tokens {fam.n_tokens} ({fam.early_stops} samples stopped early), reference {coarse}")
        for o in ("probability", "id"):
            r = fam.pooled(o)
            lines.append(f"  omnibus PIT KS, {o} order: p {_p(r.pvalue)} (alpha {r.alpha:.2g}); "
                         f"catches a PIT deviation d >= {r.detectable:.3f} (per-token TV, power 0.99)"
                         + ("" if r.passed else FAIL))
        pos = [r for r in fam.rows if r.scope.startswith("position")]
        if pos:
            w = min(pos, key=lambda r: r.pvalue)
            bad = [r for r in pos if not r.passed]
            lines.append(f"  per position: smallest p {_p(w.pvalue)} ({w.scope}, {w.order}; alpha {w.alpha:.2g} each)"
                         + (f"; {len(bad)} of {len(pos)} rows below their alpha{FAIL}" if bad else ""))
            lines.extend(f"    {r.scope}, {r.order} order: p {_p(r.pvalue)} (alpha {r.alpha:.2g}){FAIL}"
                         for r in bad[:8])
            if len(bad) > 8:
                lines.append(f"    ... {len(bad) - 8} more failing position rows (the JSON lists every row)")
        for d in fam.directional:
            det = (f"catches {d.unit} >= {d.detectable:.3g}" if d.unit.startswith(("|", "weight"))
                   else ("this level's truncation would be caught" if d.detectable >= 1 else
                         "a truncation at this level is not resolved at this N"))
            lines.append(f"  {d.name}: {_stat(d)} {_p(d.statistic)}, p {_p(d.pvalue)} (alpha {d.alpha:.2g}); "
                         f"observed {d.observed:.4g} vs expected {d.expected:.4g}; {det}"
                         + ("" if d.passed else FAIL))
        if fam.impossible:
            lines.append(f"  {fam.impossible} tokens the reference gives probability 0{FAIL}")
    if cert.numerics is not None:
        eta, q99, exact_passed = cert.numerics
        lines.append(f"numerics: the engine's reported log-probs differ from the reference's by {q99:.2g} nats at "
                     f"the 99th percentile: eta = {eta:.2g} per token (--tolerance auto)")
        if fam is not None and fam.passed and not exact_passed:
            lines.append("  the exact test (eta = 0) fails and the tolerant one passes: the deviation is within this "
                         "deployment's numerical drift from the reference (rounding, a quantized copy), not a change "
                         "of law beyond it")
        elif fam is not None and not fam.passed:
            lines.append("  the law differs from the reference by more than this deployment's numerical drift")
    if cert.logprobs is not None:
        lp = cert.logprobs
        lines.append(f"reported log-probs vs reference: {lp.n} tokens, median gap {lp.median:.2g}, largest "
                     f"{lp.largest:.3g} nats (bound {lp.bound:g}): " + ("ok" if lp.passed else f"{lp.over} over the bound{FAIL}"))
    for r in getattr(cert, "reports", ()):
        lines.append(_report_line(r))
    lines.extend(audit_lines(getattr(cert, "audit", None)))
    for i, reason in cert.impossible[:5]:
        lines.append(f"impossible sample {i}: {reason}{FAIL}")
    if len(cert.impossible) > 5:
        lines.append(f"... {len(cert.impossible) - 5} more impossible samples")
    n, same = cert.replays
    if n:
        lines.append(f"seeds: {same} of {n} replayed seeds gave the same sample"
                     + (" (the deployment reproduces a sample from its seed)" if same == n else
                        " (the deployment does not reproduce a sample from its seed; the test does not need it)"))
    pairs, expected = cert.duplicates
    lines.append(f"identical samples: {pairs} pairs for different seeds (at most {expected:.2g} expected)"
                 + (f"{FAIL}\n  {cert.dependence}" if getattr(cert, "dependence", "") else ""))
    skipped = sum(1 for rs in cert.records for r in rs if r.get("skip"))
    if skipped or plan.as_client or getattr(plan, "top_p", 1.0) < 1 or getattr(plan, "sampling_top_k", 0) > 0 \
            or getattr(plan, "min_p", 0.0) > 0:
        lines.append(f"declared law: T {plan.temperature:g}, top-p {plan.top_p:g}, top-k {plan.sampling_top_k or 'none'}, "
                     f"min-p {plan.min_p:g}" + (" (requests as the client sends them)" if plan.as_client else "")
                     + (f"; {skipped} positions skipped (a truncation boundary within the reported precision or "
                        "beyond the top-k list: untested, docs/guarantees.md)" if skipped else ""))
    if cert.short:
        lines.append(f"the reference gave fewer than k = {plan.k} alternatives at {cert.short} positions (those "
                     "laws are coarsened further)")
    if cert.errors:
        lines.append(f"failed requests: {sum(cert.errors.values())} ("
                     + "; ".join(f"{v} × {k}" for k, v in cert.errors.most_common(3)) + ")")
        lines.extend(f"  {e}" for e in cert.first_errors)
    lines.extend(f"note: {n}" for n in cert.notes)
    rate = cert.samples_per_second  # nan when this run drew no sample: no rate is printed then
    lines.append(f"{cert.new_samples} samples drawn in {cert.wall_s:.1f} s"
                 + (f" ({rate:.2f} samples/s)" if math.isfinite(rate) else "")
                 + (f"; {cert.samples - cert.new_samples} read back from the run file" if cert.samples > cert.new_samples else ""))
    lines.append(f"what each test sees and misses: {SEE}")
    return "\n".join(lines)


def _report_line(r) -> str:
    """One report test (``oracle.sequence_reports``) as a line, marked when it fails."""
    if r.name.startswith("reported top-k"):
        what = (f"{r.observed:.0f} sampled tokens outside top-k lists that claim nearly the whole law "
                f"({r.n} such positions; at most {r.expected:.2g} expected from their 'other' mass)")
    elif r.name.startswith("independence"):
        what = (f"{r.observed:.0f} tokens of samples of one prompt fell where earlier samples went after the same "
                f"prefix ({r.n} positions compared; at most {r.expected:.2g} expected under independence)")
    elif r.name.startswith("reported log-probs"):
        side = "above +" if r.statistic > 0 else "below -" if r.statistic < 0 else "beyond +-"
        what = (f"{r.observed:.0f} of {r.n} sampled tokens' reported log-probs {side}{r.bias:g} nats from the "
                f"reference's (the null allows half); catches a systematic shift >= {r.detectable:.2g} nats")
    else:
        what = f"observed {r.observed:.4g} vs expected {r.expected:.4g}"
    stat = f"log W {_p(r.statistic)}" if r.unit.startswith(("tokens outside", "positions")) else f"z {_p(r.statistic)}"
    return f"{r.name}: {what}; {stat}, p {_p(r.pvalue)} (alpha {r.alpha:.2g})" + ("" if r.passed else FAIL)


def deciding_lines(cert) -> list[str]:
    """Why a certificate's verdict is not PASS, as short lines (empty for PASS): the refusal; each
    failed test of the family (directional tests first, then the omnibus KS rows), tokens or samples
    the reference calls impossible, the reported log-probabilities over their bound; for an
    INCOMPLETE run, the samples tested of those planned, why the run stopped and its first failed
    requests.  The pytest fixture ``spectr_endpoint`` puts them first in its failure message."""
    if cert.verdict == "PASS":
        return []
    if cert.refused:
        return [f"refused: {cert.refused}"]
    lines, fam = [], cert.family
    if getattr(cert, "dependence", ""):
        lines.append(cert.dependence)
    if fam is not None:
        for d in fam.directional:
            if not d.passed:
                stat = _stat(d)
                lines.append(f"{d.name} test failed: {stat} {_p(d.statistic)}, p {_p(d.pvalue)} < alpha {d.alpha:.2g} "
                             f"(observed {d.observed:.4g} vs expected {d.expected:.4g})")
        for r in fam.rows:
            if not r.passed:
                lines.append(f"omnibus PIT {r.test} test failed ({r.scope}, {r.order} order): p {_p(r.pvalue)} < "
                             f"alpha {r.alpha:.2g}")
        if fam.impossible:
            lines.append(f"{fam.impossible} sampled tokens have probability 0 under the reference")
    for r in getattr(cert, "reports", ()):
        if not r.passed:
            lines.append(f"{r.name} test failed: p {_p(r.pvalue)} < alpha {r.alpha:.2g} (observed {r.observed:.4g} "
                         f"vs expected {r.expected:.4g})")
    if cert.logprobs is not None and not cert.logprobs.passed:
        lp = cert.logprobs
        lines.append(f"reported log-probabilities failed: {lp.over} of {lp.n} tokens differ from the reference's by "
                     f"more than {lp.bound:g} nats (largest {lp.largest:.3g})")
    if cert.impossible:
        i, reason = cert.impossible[0]
        lines.append(f"{len(cert.impossible)} impossible samples (sample {i}: {reason})")
    if cert.verdict == "INCOMPLETE":
        lines.append(f"incomplete: tested {cert.samples} of the {cert.plan.n_samples} planned samples")
        lines.extend(n for n in cert.notes if n.startswith("stopped"))
        if cert.errors:
            lines.append(f"failed requests: {sum(cert.errors.values())}")
            lines.extend(f"  {e}" for e in cert.first_errors[:3])
    return lines


def power_report(pp, plan, pilot_samples: int, rate: float) -> str:
    """A plan's power (``oracle.sequence_family.PlanPower``) as lines: what N × n detects with
    power 0.99, and the samples (and time at the pilot's rate) for the omnibus target."""
    T = plan.temperature
    lines = [f"plan: N = {getattr(plan, 'planned_samples', plan.n_samples)} samples × {plan.n_new} tokens = "
             f"{pp.n_tokens} tokens, alpha = "
             f"{pp.alpha:g}, eta = {pp.tolerance:g} (scaled from a pilot of {pilot_samples} samples)",
             "detected with power 0.99:",
             f"  omnibus PIT tests: a per-token TV d >= {pp.omnibus:.3f} (monotone deviation)",
             f"  temperature: |ΔT| >= {pp.temperature * T:.3g} at T = {T:g} (|Δβ| >= {pp.temperature:.3g})",
             f"  position shift (stale logits): weight >= {pp.position_shift:.3g}"]
    if math.isfinite(pp.draft_leak):
        lines.append(f"  draft leak: weight >= {pp.draft_leak:.3g}")
    caught = [k for k, v in pp.truncation.items() if v]
    lines.append("  truncation: a sampler truncating at " + (", ".join(caught) if caught else "no level")
                 + " is caught for sure" + (f"; not resolved: {', '.join(k for k, v in pp.truncation.items() if not v)}"
                                            if len(caught) < len(pp.truncation) else ""))
    if pp.tokens_for_tv is not None:
        need = math.ceil(pp.tokens_for_tv / plan.n_new)
        when = (f" (about {need / rate / 60:.0f} min at the pilot's {rate:.2f} samples/s)"
                if math.isfinite(rate) and rate > 0 else "")
        lines.append(f"omnibus per-token TV <= {pp.target_tv:g}: --samples {need}{when}")
    return "\n".join(lines)


def _sequence_json(seq):
    if not seq:
        return None
    res = seq.get("resolution") or {}
    return {**{k: v for k, v in seq.items() if k != "resolution"},
            "resolution": {k: {"figure": v if math.isfinite(v) else None, "resolved": bool(ok)}
                           for k, (v, ok) in res.items()}}


def look_json(alpha: float, j: int):
    """{"j", "alpha_j", "spent"} of a certificate's look (``oracle.look_spending``), None before any."""
    from spectr_gbv.oracle.look_spending import look_alpha, spent

    return {"j": j, "alpha_j": look_alpha(alpha, j), "spent": spent(alpha, j)} if j else None


def family_json(fam) -> dict:
    """A ``oracle.sequence_family.FamilyResult`` as a JSON-ready dict (every omnibus row and
    directional test): the "family" of ``certificate_json``, and of ``certify log``'s certificate."""
    return {
        "passed": fam.passed, "alpha": fam.alpha, "tolerance": fam.tolerance, "n_tokens": fam.n_tokens,
        "n_sequences": fam.n_sequences, "early_stops": fam.early_stops, "impossible": fam.impossible,
        "coarsened_k": fam.coarsened, "detectable": fam.detectable,
        "rows": [{"scope": r.scope, "order": r.order, "test": r.test, "statistic": r.statistic,
                  "pvalue": r.pvalue, "n": r.n, "alpha": r.alpha, "detectable": r.detectable,
                  "passed": r.passed} for r in fam.rows],
        "directional": [{"name": d.name, "statistic": d.statistic, "pvalue": d.pvalue, "n": d.n,
                         "observed": d.observed, "expected": d.expected, "variance": d.variance,
                         "bias": d.bias, "alpha": d.alpha, "sided": d.sided, "detectable": d.detectable,
                         "unit": d.unit, "passed": d.passed} for d in fam.directional]}


def certificate_json(cert) -> dict:
    """The certificate as a JSON-ready dict (every test row)."""
    from dataclasses import asdict

    fam = cert.family
    return {
        "verdict": cert.verdict, "server": cert.server, "model": cert.model, "reference": cert.reference,
        "plan": asdict(cert.plan), "samples": cert.samples, "complete": cert.complete, "refused": cert.refused,
        "dependence": getattr(cert, "dependence", ""), "wall_s": cert.wall_s, "new_samples": cert.new_samples,
        "samples_per_second": cert.samples_per_second if math.isfinite(cert.samples_per_second) else None,
        "impossible": [{"i": i, "reason": r} for i, r in cert.impossible],
        "replays": {"asked": cert.replays[0], "identical": cert.replays[1]},
        "duplicates": {"pairs": cert.duplicates[0], "expected_at_most": cert.duplicates[1]},
        "errors": dict(cert.errors), "short": cert.short, "notes": cert.notes,
        "sequence": _sequence_json(getattr(cert, "sequence", None)),
        "look": look_json(cert.plan.alpha, getattr(cert, "look", 0)),
        "numerics": None if cert.numerics is None else {
            "eta": cert.numerics[0], "gap_q99": cert.numerics[1], "exact_test_passed": cert.numerics[2]},
        "logprobs": None if cert.logprobs is None else {
            "n": cert.logprobs.n, "median": cert.logprobs.median, "largest": cert.logprobs.largest,
            "bound": cert.logprobs.bound, "over": cert.logprobs.over, "passed": cert.logprobs.passed},
        "audit": _audit_json(getattr(cert, "audit", None)),
        "reports": [{"name": r.name, "statistic": r.statistic if math.isfinite(r.statistic) else None,
                     "pvalue": r.pvalue, "n": r.n, "observed": r.observed, "expected": r.expected, "alpha": r.alpha,
                     "passed": r.passed}
                    for r in getattr(cert, "reports", ())],
        "family": None if fam is None else family_json(fam),
    }


def _audit_json(au):
    if au is None or not hasattr(au, "unseen_fraction"):
        return None
    fam = au.family
    return {"samples": au.samples, "fraction": au.fraction, "passed": au.passed,
            "unseen_at_0.05": au.unseen_fraction,
            "family_passed": None if fam is None else fam.passed,
            "family_tokens": None if fam is None else fam.n_tokens,
            "directional": [] if fam is None else [{"name": d.name, "pvalue": d.pvalue, "alpha": d.alpha,
                                                    "passed": d.passed} for d in fam.directional],
            "logprobs": None if au.logprobs is None else {"n": au.logprobs.n, "median": au.logprobs.median,
                                                          "largest": au.logprobs.largest, "over": au.logprobs.over},
            "lists": {"n": au.lists[0], "largest": au.lists[1], "over": au.lists[2]},
            "reports": [{"name": r.name, "pvalue": r.pvalue, "alpha": r.alpha, "passed": r.passed} for r in au.reports]}
