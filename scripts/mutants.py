#!/usr/bin/env python
"""Mutation testing of the rules and verifiers (issue 27 item 1): apply small defects one at a
time to a scratch copy of the checkout, measure how much each moves the law, run a list of fast
test files, and report which defects the suite kills.

Each mutant is a source patch (file, exact old text — found exactly once —, new text) to
reference/rules/*.py or gpu_backend/verifiers/*.py: wrong residual weights, off-by-one depths,
``<`` for ``<=``, a dropped bonus, a coin reused.  Per mutant:

  * TV.  reference/ mutants: the exact law (oracle.certify.exact_verdict_law, by enumeration)
    of every affected rule on its small instances — the branch-coverage case
    (oracle.certify_cases.coverage_case), the toy cases (suite.toy_cases) and, where the
    rule has one, its distinctive toy case — against the unmutated law; the largest TV over
    the instances.  gpu_backend/ mutants: the torch verifier (float32/bfloat16 as the case
    says) sampled ``--samples`` times per instance with the same seeds as the unmutated one
    (matched noise): ``flip`` = the fraction of samples whose outcome changed, an upper bound
    on the TV up to sampling error, and ``TV`` = the TV between the two empirical laws (a
    noisy estimate, biased upwards by ≈ √(flip·cells/N)).  The instances are built once, by
    the unmutated sources.  The enumerated law draws every coin afresh whatever its key
    (reference.randomness), so a reference mutant that only reuses a coin's key has exact TV 0
    here; it moves the law of the batched reference, whose uniforms are addressed by key
    (reference.randomness.MatchedSource), which the matched-noise tests compare with the port.
  * Kill.  pytest on ``TESTS`` in the scratch copy (-x first; where the first failure is not
    an assertion, the list is rerun without -x): ``assertion`` if a test failed with an
    AssertionError (a plain assert, an assertion on a certification verdict) or pytest.fail /
    pytest.raises' "DID NOT RAISE"; ``crash`` if tests failed only with other exceptions;
    ``survived`` if all passed.

Exit status 1 if a mutant whose TV (reference: exact; torch: the matched-noise estimate) is
≥ 1e-3 survived or was killed by a crash only; 0 otherwise.  ``--markdown`` writes the table
(benchmarks/MUTANTS.md).  Slow (minutes per mutant on 2 CPU cores): not in CI;
tests/test_mutants_list.py checks that every patch still applies to the sources.

Usage:
    python scripts/mutants.py [--only NAME[,NAME]] [--list] [--samples N] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TV_THRESHOLD = 1e-3


@dataclass(frozen=True)
class Mutant:
    """One small defect.

    Attributes:
        name: short id (``--only``).  path: file relative to the repository root.
        old, new: the exact text replaced (must occur exactly once in ``path``) and its
            replacement.  rules: registered rules whose law the defect may move (measured).
        description: one line for the table.
    """

    name: str
    path: str
    old: str
    new: str
    rules: tuple[str, ...]
    description: str

    @property
    def kind(self) -> str:
        return "reference" if self.path.startswith("reference/") else "torch"


R = "reference/rules/"
G = "gpu_backend/verifiers/"
MUTANTS: tuple[Mutant, ...] = (
    # -- reference (numpy) rules ----------------------------------------------------------------
    Mutant("ref_bv_unweighted_residual", R + "bv.py",
           'residual = block.plan["weight"][tau] * block.tp[0, tau] - block.dp[0, tau]',
           'residual = block.tp[0, tau] - block.dp[0, tau]', ("bv",),
           "BV correction (q − p)_+ instead of (p_τ·q − p)_+"),
    Mutant("ref_bv_first_success", R + "bv.py",
           "for i in range(L, 0, -1):  # τ is the LAST i whose coin succeeds",
           "for i in range(1, L + 1):  # τ is the LAST i whose coin succeeds", ("bv",),
           "BV τ = the first successful coin instead of the last"),
    Mutant("ref_bv_hL_one", R + "bv.py", "h[L] = weight[L]", "h[L] = 1.0", ("bv",),
           "BV accepts the whole block surely (h_L = 1 instead of p_L)"),
    Mutant("ref_sd_residual_q", R + "sd.py", "residual = block.tp[0, i] - block.dp[0, i]",
           "residual = block.tp[0, i]", ("sd",), "token verification correction q instead of (q − p)_+"),
    Mutant("ref_sd_bonus_row", R + "sd.py", "(source.draw(block.tp[0, block.L]),)",
           "(source.draw(block.tp[0, block.L - 1]),)", ("sd",),
           "token verification bonus drawn from row L − 1 (off-by-one depth)"),
    Mutant("ref_gbv_unweighted_residual", R + "gbv.py",
           "token = draw_residual(source, r * block.tp[k, tau] - block.dp[k, tau], block.tp[k, tau])",
           "token = draw_residual(source, block.tp[k, tau] - block.dp[k, tau], block.tp[k, tau])",
           ("gbv", "kseq_gbv"), "GBV correction (q − p)_+ instead of (q(z)q − p(z)p)_+"),
    Mutant("ref_gbv_hL_depth", R + "gbv.py", "h[L] = min(1.0, r[L])", "h[L] = min(1.0, r[L - 1])",
           ("gbv", "kseq_gbv"), "GBV last coin with the ratio of depth L − 1 (off-by-one depth)"),
    Mutant("ref_spectr_rho1", R + "spectr.py", "source.coin(min(1.0, q[x] / (rho * p[x])), (j, depth + 1))",
           "source.coin(min(1.0, q[x] / p[x]), (j, depth + 1))", ("spectr",),
           "SpecTr acceptance min(1, q/p) instead of min(1, q/(ρp))"),
    Mutant("ref_spectr_coin_reused", R + "spectr.py", "source.coin(min(1.0, q[x] / (rho * p[x])), (j, depth + 1))",
           "source.coin(min(1.0, q[x] / (rho * p[x])), (alive[0], depth + 1))", ("spectr",),
           "SpecTr: every draft reads the lead draft's coin (coin reused)"),
    Mutant("ref_kseq_bv_root_residual", R + "kseq_bv.py", 'token = draw_residual(source, q - block.plan["rho"] * p, q)',
           "token = draw_residual(source, q - p, q)", ("kseq_bv",),
           "K-SEQ-BV τ = 0 correction (q − p)_+ instead of (q − ρp)_+"),
    Mutant("ref_spectr_gbv_fixed_residual", R + "spectr_gbv.py", "weights = q_next * (1.0 - m) ** K",
           "weights = q_next * (1.0 - m ** K)", ("spectr_gbv_fixed",),
           "SpecTr-GBV consistent residual (1 − m)^K replaced by 1 − m^K"),
    Mutant("ref_mdbv_leaf_coin_reused", R + "mdbv.py", "if source.coin(node.fallback, (k, L)):",
           "if source.coin(node.fallback, (k, L - 1)):", ("mdbv", "mdbv_kseq"),
           "MDBV leaf coin keyed (k, L − 1): reuses its parent's coin"),
    # -- torch verifiers --------------------------------------------------------------------------
    Mutant("torch_bv_unweighted_residual", G + "bv.py",
           "last = noise.draw(w_tau * q_row - residual * p_row, q_row)",
           "last = noise.draw(q_row - residual * p_row, q_row)", ("bv",),
           "torch BV correction (q − p)_+ instead of (p_τ·q − p)_+ (issue 27)"),
    Mutant("torch_bv_hL_one", G + "bv.py", "h[:, L] = weight[:, L]", "h[:, L] = 1.0", ("bv",),
           "torch BV accepts the whole block surely (h_L = 1)"),
    Mutant("torch_sd_lt", G + "sd.py", "success = noise.uniforms[:, 0, 1:] <= accept",
           "success = noise.uniforms[:, 0, 1:] < accept", ("sd",),
           "torch token verification u < a instead of u ≤ a (equivalent: P(u = a) = 0)"),
    Mutant("torch_sd_dropped_bonus", G + "sd.py", "residual = (tau < batch.L).to(batch.dtype).unsqueeze(1)",
           "residual = torch.ones_like(tau).to(batch.dtype).unsqueeze(1)", ("sd",),
           "torch token verification: bonus replaced by a residual against row L − 1"),
    Mutant("torch_gbv_unweighted_residual", G + "gbv.py", "last = noise.draw(cq * q_row - cp * p_row, q_row)",
           "last = noise.draw(q_row - cp.clamp_max(1.0) * p_row, q_row)", ("gbv", "kseq_gbv"),
           "torch GBV correction without the joint weight q(z)/(ρp(z))"),
    Mutant("torch_gbv_hL_depth", G + "gbv.py", "h[:, :, L] = r[:, :, L]", "h[:, :, L] = r[:, :, L - 1]",
           ("gbv", "kseq_gbv", "spectr_gbv", "spectr_gbv_fixed"),
           "torch GBV last coin with the ratio of depth L − 1 (off-by-one depth)"),
    Mutant("torch_gbv_le_lt", G + "gbv.py", "success = uniforms[..., 1:] <= h[..., 1:]",
           "success = uniforms[..., 1:] < h[..., 1:]", ("gbv", "kseq_gbv", "kseq_bv", "bv"),
           "torch last_success u < h instead of u ≤ h (equivalent: P(u = h) = 0)"),
    Mutant("torch_spectr_rho1", G + "spectr.py", "den = rho.unsqueeze(1) * px", "den = px", ("spectr",),
           "torch SpecTr acceptance min(1, q/p) instead of min(1, q/(ρp))"),
    Mutant("torch_kseq_bv_root_residual", G + "kseq_bv.py", "torch.where(tau == 0, rho, torch.zeros_like(rho))",
           "torch.where(tau == 0, torch.ones_like(rho), torch.zeros_like(rho))", ("kseq_bv",),
           "torch K-SEQ-BV τ = 0 correction (q − p)_+ instead of (q − ρp)_+"),
    Mutant("torch_kseq_bv_coin_reused", G + "kseq_bv.py", "tau_k = last_success(noise.uniforms, h)  # [B, K]",
           "tau_k = last_success(noise.uniforms[:, :1].expand_as(h), h)  # [B, K]", ("kseq_bv",),
           "torch K-SEQ-BV: every draft reads draft 0's coins (coin reused)"),
    Mutant("torch_kseq_bv_hL_depth", G + "kseq_bv.py", "h[:, :, L] = weight[:, :, L]",
           "h[:, :, L] = weight[:, :, L - 1]", ("kseq_bv",),
           "torch K-SEQ-BV last coin p_{L−1} instead of p_L (off-by-one depth)"),
    Mutant("torch_mdbv_kseq_fallback", G + "mdbv_kseq.py",
           "fallback = torch.where(tot < 1.0, (wi - tot) / (1.0 - tot).clamp_min(1e-300), torch.ones_like(tot))",
           "fallback = torch.where(tot < 1.0, wi, torch.ones_like(tot))", ("mdbv_kseq",),
           "torch MDBV-KSEQ fallback coin w instead of (w − ΣA)/(1 − ΣA)"),
)

# Fast test files (about 2-4 minutes on 2 CPU cores unmutated): the exact reference checks, the
# matched-noise torch-vs-reference tests and the certification of the toy and coverage cases.
TESTS = (  # the quickest killers first: -x stops at the first failure
    "tests/certify/verifiers/test_verifiers_certify.py::test_certify_coverage_case",
    "tests/oracle/test_case_coverage.py",
    "tests/gpu_backend/verifiers/test_verifiers_matched.py",
    "tests/reference/test_lossless.py",
    "tests/reference/test_toy_values.py",
    "tests/certify/verifiers/test_verifiers_certify.py::test_certify_toy_cases",
    "tests/certify/verifiers/test_verifiers_certify_distinctive.py::test_certify_toy_case",
)


def check_applies(root: Path = ROOT, mutants=MUTANTS) -> list[str]:
    """Problems with the mutant list against the sources under ``root`` (empty: all apply):
    a file missing, an old text found other than exactly once, a no-op patch, a repeated name."""
    problems, seen = [], set()
    for m in mutants:
        if m.name in seen:
            problems.append(f"{m.name}: name repeated")
        seen.add(m.name)
        path = root / m.path
        if not path.is_file():
            problems.append(f"{m.name}: {m.path} missing")
            continue
        n = path.read_text(encoding="utf-8").count(m.old)
        if n != 1:
            problems.append(f"{m.name}: old text found {n} times in {m.path}")
        if m.old == m.new:
            problems.append(f"{m.name}: old and new text are equal")
    return problems


# -- measuring (runs inside the scratch copy: ``--measure OUT --rules a,b --what ref|torch``) --------

def instances(rule: str) -> list:
    """The small instances of ``rule``: coverage case, toy cases, distinctive toy case."""
    from spectr_gbv.certify import suite
    from spectr_gbv.oracle.certify_cases import coverage_case

    out = [coverage_case(rule)] + suite.toy_cases(rule)
    out += suite.distinctive_cases(rule)[:1]
    return out


def load_instances(rules: list[str], cases_file: str) -> dict:
    """{rule: its instances}, built once by the unmutated sources and pickled to ``cases_file``
    (toy cases are chosen by the reference's law: a mutated reference must be measured on the
    same drafts, not on the ones it would choose)."""
    path = Path(cases_file)
    cached = pickle.loads(path.read_bytes()) if path.is_file() else {}
    missing = [r for r in rules if r not in cached]
    if missing:
        cached.update({r: instances(r) for r in missing})
        path.write_bytes(pickle.dumps(cached))
    return {r: cached[r] for r in rules}


def measure(rules: list[str], what: str, n: int, cases_file: str) -> dict:
    """{(rule, case name): exact law dict (what = "ref") or the outcomes as int64 rows
    (τ, accepted prefix padded with −1, emitted token) of ``n`` torch samples (torch); an
    error message instead where the mutated code raises."""
    import numpy as np

    from spectr_gbv.oracle.certify import chunk_seeds, exact_verdict_law
    from spectr_gbv.reference.rules import get_rule

    out = {}
    cases = load_instances(rules, cases_file)
    for rule in rules:
        for case in cases[rule]:
            if what == "ref":
                try:
                    law = exact_verdict_law(get_rule(rule), case.draft_tokens, case.draft_probs, case.target_probs)
                except Exception as err:  # a crashing reference has no law
                    law = f"{type(err).__name__}: {err}"
                out[(rule, case.name)] = law
                continue
            import torch

            from spectr_gbv.certify.suite import suite_verifier
            from spectr_gbv.oracle.certify import to_numpy

            torch.set_num_threads(1)
            try:
                verifier = suite_verifier(rule, getattr(torch, case.backend_dtype))
                arrays = (case.draft_tokens, case.backend_draft_probs, case.backend_target_probs)
                taus, toks, done, c = [], [], 0, 0
                while done < n:
                    B = min(16384, n - done)
                    batch = [np.broadcast_to(a, (B,) + a.shape) for a in arrays]
                    v = verifier(*batch, seeds=chunk_seeds(0, c, B))
                    taus.append(to_numpy(v.tau).astype(np.int64))
                    toks.append(to_numpy(v.tokens).astype(np.int64))
                    done, c = done + B, c + 1
                tau, tokens = np.concatenate(taus), np.concatenate(toks)
                emitted = tokens[np.arange(len(tau)), tau]
                # an outcome: (τ, accepted prefix, emitted token) as one row of L + 2 ints
                L = case.L
                keep = np.where(np.arange(L)[None, :] < tau[:, None], tokens[:, :L], -1)
                out[(rule, case.name)] = np.concatenate([tau[:, None], keep, emitted[:, None]], axis=1)
            except Exception as err:
                out[(rule, case.name)] = f"{type(err).__name__}: {err}"
    return out


def tv_ref(base: dict, mut: dict) -> tuple[float, str]:
    """Largest exact TV over the instances (inf where the mutant crashes)."""
    from spectr_gbv.reference.exact import total_variation

    worst, where = 0.0, ""
    for key, law in mut.items():
        if isinstance(law, str):
            return float("inf"), f"{key[1]}: {law}"
        tv = total_variation(base[key], law)
        if tv > worst:
            worst, where = tv, key[1]
    return worst, where


def tv_torch(base: dict, mut: dict) -> tuple[float, float, str]:
    """(largest matched-noise empirical TV, largest flip rate, instance) over the instances."""
    import numpy as np

    worst, flip_max, where = 0.0, 0.0, ""
    for key, rows in mut.items():
        if isinstance(rows, str):
            return float("inf"), 1.0, f"{key[1]}: {rows}"
        ref = base[key]
        flip = float(np.any(rows != ref, axis=1).mean())
        values, inverse = np.unique(np.concatenate([ref, rows]), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        n = len(ref)
        a = np.bincount(inverse[:n], minlength=len(values)) / n
        b = np.bincount(inverse[n:], minlength=len(values)) / n
        tv = 0.5 * float(np.abs(a - b).sum())
        flip_max = max(flip_max, flip)
        if tv > worst:
            worst, where = tv, key[1]
    return worst, flip_max, where


# -- driving -------------------------------------------------------------------------------------

def scratch_copy() -> Path:
    """A copy of the checkout's tracked and untracked-not-ignored files in a temporary folder
    (imports resolve to it: spectr_gbv/__init__.py adds the checkout beside it)."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
                           check=True, capture_output=True, text=True).stdout.split("\n")
    dest = Path(tempfile.mkdtemp(prefix="mutants-"))
    for f in files:
        if f and (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    return dest


def env_for(scratch: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(scratch)
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_measure(scratch: Path, rules, what: str, n: int) -> dict:
    out = scratch / f"measure-{what}.pkl"
    cases = scratch.parent / (scratch.name + "-cases.pkl")  # outside the copy: never patched
    proc = subprocess.run([sys.executable, str(scratch / "scripts" / "mutants.py"), "--measure", str(out),
                           "--rules", ",".join(rules), "--what", what, "--samples", str(n),
                           "--cases", str(cases)],
                          cwd=scratch, env=env_for(scratch), capture_output=True, text=True)
    if proc.returncode != 0:
        return {(r, "import"): f"measure failed: {proc.stderr.strip().splitlines()[-1:]}" for r in rules}
    with open(out, "rb") as f:
        return pickle.load(f)


def _failures(xml: Path) -> list[tuple[str, str]]:
    """(test id, message) of every failed or errored test in a junit XML report."""
    out = []
    if not xml.is_file():
        return [("pytest", "no report (collection crashed)")]
    for case in ET.parse(xml).getroot().iter("testcase"):
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                out.append((f"{case.get('classname')}::{case.get('name')}", (el.get("message") or tag)))
    return out


def _is_assertion(message: str) -> bool:
    m = message.lstrip()
    return m.startswith("assert") or m.startswith("AssertionError") or m.startswith("Failed:")


def run_tests(scratch: Path, tests, exitfirst: bool) -> tuple[int, list[tuple[str, str]]]:
    xml = scratch / "report.xml"
    if xml.exists():
        xml.unlink()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
           "-m", "not models"] + (["-x"] if exitfirst else []) + list(tests)
    proc = subprocess.run(cmd, cwd=scratch, env=env_for(scratch), capture_output=True, text=True)
    return proc.returncode, _failures(xml)


def classify(scratch: Path, tests) -> tuple[str, str]:
    """("assertion" | "crash" | "survived", the first failing test and its message)."""
    rc, fails = run_tests(scratch, tests, exitfirst=True)
    if rc == 0 and not fails:
        return "survived", ""
    if any(_is_assertion(m) for _, m in fails):
        t, m = next((t, m) for t, m in fails if _is_assertion(m))
        return "assertion", f"{t}: {m.splitlines()[0][:100]}"
    rc, fails = run_tests(scratch, tests, exitfirst=False)
    if any(_is_assertion(m) for _, m in fails):
        t, m = next((t, m) for t, m in fails if _is_assertion(m))
        return "assertion", f"{t}: {m.splitlines()[0][:100]}"
    if fails:
        return "crash", f"{fails[0][0]}: {fails[0][1].splitlines()[0][:100]}"
    return ("survived", "") if rc == 0 else ("crash", f"pytest exit {rc}")


@dataclass
class Result:
    mutant: Mutant
    tv: float
    flip: float
    where: str
    verdict: str
    detail: str
    seconds: float

    @property
    def law_changed(self) -> bool:
        return self.tv >= TV_THRESHOLD

    @property
    def bad(self) -> bool:
        return self.law_changed and self.verdict != "assertion"


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return " ".join(f for f in ("avx2", "avx512f", "fma", "sse4_2") if f in flags)
    except OSError:
        pass
    return platform.machine()


def table(results: list[Result]) -> str:
    head = ("mutant", "file", "kind", "TV", "flip", "instance", "killed by", "first kill", "s")
    rows = [head, tuple("---" for _ in head)]
    for r in results:
        flip = "—" if r.mutant.kind == "reference" else f"{r.flip:.4f}"
        rows.append((r.mutant.name, r.mutant.path, r.mutant.kind, f"{r.tv:.4g}", flip, r.where or "—",
                     r.verdict + (" **(TV ≥ 1e-3)**" if r.bad else ""), r.detail.replace("|", "\\|") or "—",
                     f"{r.seconds:.0f}"))
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def summary(results: list[Result]) -> str:
    changed = [r for r in results if r.law_changed]
    killed = sum(r.verdict == "assertion" for r in changed)
    crash = sum(r.verdict == "crash" for r in changed)
    surv = sum(r.verdict == "survived" for r in changed)
    small = [r for r in results if not r.law_changed]
    return (f"{len(results)} mutants; {len(changed)} move a law by TV ≥ 1e-3: {killed} killed by an "
            f"assertion, {crash} by a crash only, {surv} survived; {len(small)} move it by less "
            f"({sum(r.verdict == 'assertion' for r in small)} of them killed anyway, "
            f"{sum(r.verdict == 'survived' for r in small)} survived)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--samples", type=int, default=200_000, help="torch samples per instance (default 200000)")
    ap.add_argument("--markdown", help="write the results table to this file")
    ap.add_argument("--tests", help="comma-separated pytest targets (default: TESTS)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--rules", help=argparse.SUPPRESS)
    ap.add_argument("--what", help=argparse.SUPPRESS)
    ap.add_argument("--cases", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.measure:  # inner mode, in the scratch copy
        with open(args.measure, "wb") as f:
            pickle.dump(measure(args.rules.split(","), args.what, args.samples, args.cases), f)
        return 0
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:32s} {m.path:34s} {m.description}")
        return 0
    problems = check_applies()
    if problems:
        print("mutant list does not apply:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    chosen = MUTANTS
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in {m.name for m in MUTANTS}]
        if unknown:
            print(f"unknown mutant(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
            return 2
        chosen = tuple(m for m in MUTANTS if m.name in names)
    tests = tuple(t for t in args.tests.split(",") if t) if args.tests else TESTS

    start = time.perf_counter()
    scratch = scratch_copy()
    print(f"scratch copy: {scratch}", flush=True)
    try:
        rules = sorted({r for m in chosen for r in m.rules})
        base_ref = run_measure(scratch, rules, "ref", args.samples)
        base_torch = run_measure(scratch, sorted({r for m in chosen if m.kind == "torch" for r in m.rules}),
                                 "torch", args.samples)
        broken = [k for k, v in {**base_ref, **base_torch}.items() if isinstance(v, str)]
        if broken:
            print(f"baseline measurement failed: {broken}", file=sys.stderr)
            return 2
        t0 = time.perf_counter()
        verdict, detail = classify(scratch, tests)
        print(f"baseline tests: {verdict} in {time.perf_counter() - t0:.0f} s {detail}", flush=True)
        if verdict != "survived":
            print("the unmutated sources fail the test list: fix that first", file=sys.stderr)
            return 2
        results = []
        for m in chosen:
            t0 = time.perf_counter()
            path = scratch / m.path
            original = path.read_text(encoding="utf-8")
            path.write_text(original.replace(m.old, m.new), encoding="utf-8")
            try:
                if m.kind == "reference":
                    tv, where = tv_ref(base_ref, run_measure(scratch, m.rules, "ref", args.samples))
                    flip = float("nan")
                else:
                    tv, flip, where = tv_torch(base_torch, run_measure(scratch, m.rules, "torch", args.samples))
                verdict, detail = classify(scratch, tests)
            finally:
                path.write_text(original, encoding="utf-8")
            res = Result(m, tv, flip, where, verdict, detail, time.perf_counter() - t0)
            results.append(res)
            print(f"{m.name:32s} TV {tv:.4g} flip {flip:.4g} -> {verdict} {detail[:90]} ({res.seconds:.0f} s)",
                  flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        (scratch.parent / (scratch.name + "-cases.pkl")).unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    print("\n" + table(results) + "\n\n" + summary(results))
    if args.markdown:
        when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        text = "\n".join([
            "# Mutation testing of the rules and verifiers",
            "",
            f"Generated by `python scripts/mutants.py{' --only ' + args.only if args.only else ''}"
            f"{' --samples ' + str(args.samples) if args.samples != 200_000 else ''}` on {when}, "
            f"{platform.machine()} CPU ({cpu_flags()}), {os.cpu_count()} cores (shared), in {seconds / 60:.1f} min.",
            "",
            "Each mutant is one small source patch (scripts/mutants.py MUTANTS), applied alone to a scratch "
            "copy.  *TV*: reference mutants — the exact TV (by enumeration) between the mutated and the "
            "correct law, the largest over the rule's coverage, toy and distinctive toy cases; torch "
            f"mutants — the TV between the mutated and the unmutated verifier's empirical laws on the same "
            f"{args.samples:,} seeds per instance (an estimate), with *flip* the fraction of those samples "
            "whose outcome changed (an upper bound on the TV up to sampling error).  *killed by*: "
            "`assertion` (a test failed on an assertion, e.g. a certification verdict), `crash` (tests "
            "failed only with other exceptions), `survived`.  Tests run: " + ", ".join(f"`{t}`" for t in tests) + ".",
            "",
            f"**{summary(results)}**",
            "",
            table(results),
            "",
        ])
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 1 if any(r.bad for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
