"""``spectr-gbv report``: the main job — claims, certification and, with ``--full``, the
engine's certificate and a short benchmark, in one markdown report.

Parts, each run even when an earlier one failed:
1. ``prove --quick`` (proofs_check.runner.prove): the papers' claims checked numerically.  A
   claim verdict "fails" is a finding about a paper, not a failure of the part; the part fails
   when it cannot run.
2. ``certify verifiers --quick`` (gpu_backend.certify.verifiers.certify_rules, every registered torch
   verifier against the oracle); the part fails unless every case is as expected.
3. Third-party verifiers (gpu_backend.adapters.third_party): transformers' assisted-generation
   verifier at its defaults and with its lossy ensemble weight, through the public harness
   (oracle.harness.certify_verifier); fails unless each is certified, or caught when lossy.
4. vLLM's own samplers (certify/samplers/vllm.py), when the vLLM environment exists
   (``scripts/install.sh --vllm``): ``certify samplers vllm`` at the report's size, N =
   ``VLLM_REPORT_N`` per case on the toy and prefix families (every sampler, replay and batch
   independence), run in that environment; fails unless every row is as expected.  Without
   the environment the part says so ("not installed") and does not count either way.
5. ``--full`` only: the engine's certificate (gpu_backend.certify.engine.quick_certification,
   as ``certify our-engine --quick``: the speculative engine end to end on the embedded tiny
   model, first-token law and per-iteration τ against the reference's exact law given the
   rows, planted wrong rules caught); fails unless certified.
6. ``--full`` only: a short benchmark (``gpu_backend.bench.run``): the Qwen2.5-Coder pair,
   HumanEval, T = 0.7, a few prompts, 64 new tokens, every method at the engine's default K
   and L.  It fails when it cannot run or when the peak RSS reaches 8 GB; the performance
   targets are reported (met / not met) but a few prompts are too noisy to fail on them.

Parts 5 and 6 take far longer than 1-3 on a CPU (benchmarks/ENGINE_CERTIFICATE.md); without
``--full`` they are listed as "not run" (never as passed) and the report says how to run them.
The exit status covers the parts of the run asked for: 0 when every one of them passed (a
part left out with ``--skip`` is not passed), 1 otherwise.

Progress: every part, and every long step inside one (a claim, a certify case, a third-party
case, a batch of engine runs, a benchmark run), prints a timestamped line to stderr, so that a
log shows where the job is.

Each part calls its library directly (no parsing of command output; part 4 alone runs a
sub-process, in the vLLM environment's interpreter, and reads the markdown it writes); a part
whose library is not installed (``ModuleNotFoundError``) is reported as "not available", which
counts as not passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import dataclass

PEAK_RSS_LIMIT_GB = 8.0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="the main job: prove --quick, certify, third-party verifiers (with --full also the "
        "engine's certificate and a short benchmark), in one markdown report",
        description="Runs the claim checks, the certification of the torch verifiers and of the "
        "third-party verifiers (with --full also the engine's certificate and a short benchmark); "
        "writes DIR/REPORT.md.  Exit status 0 only when every part run passed.",
    )
    from spectr_gbv.cli.args import dtype_or_auto, output_dir, positive_int

    p.add_argument("--out", type=output_dir, default="report", help="output folder (default ./report)")
    p.add_argument("--full", action="store_true",
                   help="also run the engine's certificate and the short benchmark (long on a CPU: "
                   "benchmarks/ENGINE_CERTIFICATE.md)")
    p.add_argument("--prompts", type=positive_int, default=3, help="benchmark prompts (default 3)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--skip", nargs="+", default=[], choices=["prove", "certify", "third_party", "vllm", "engine", "bench"],
                   help="parts to leave out (reported as skipped, not as passed)")
    p.add_argument("--target", default="target")
    p.add_argument("--draft", default="draft")
    p.add_argument("--dtype", type=dtype_or_auto, default="auto",
                   help="auto (default): bfloat16 where this machine computes it no slower than float32 (measured once per machine: gpu_backend/tuning/dtype_probe.py), else float32")
    p.add_argument("--threads", type=positive_int, default=None)
    p.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    """Before any part runs: the benchmark's model flags (always: a bad flag is refused even
    when ``--full`` is not given) and, when the benchmark runs, the memory of its probability
    rows."""
    from spectr_gbv.cli.models import check_engine_memory, check_models

    V, known = check_models(args.target, args.draft)
    if not args.full or "bench" in args.skip:
        return
    from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L

    check_engine_memory(DEFAULT_K, DEFAULT_L, V, known, "--target")


FULL_ONLY = ("engine", "bench")
VLLM_REPORT_N = 500
VLLM_REPORT_FAMILIES = "toy,prefix"
TITLES = {"prove": "prove --quick", "certify": "certify", "third_party": "third-party verifiers",
          "vllm": "vLLM's samplers",
          "engine": "engine certificate", "bench": "bench (short)"}


def log(message: str) -> None:
    """One timestamped progress line on stderr (a log shows it as a terminal does)."""
    print(f"{time.strftime('%H:%M:%S')} report: {message}", file=sys.stderr, flush=True)


@dataclass
class Part:
    """One part's outcome: status is "passed", "failed", "not available", "skipped" (on
    request), "not run" (a ``--full`` part of a default run) or "not installed" (an optional
    environment, vLLM's, is absent: counted neither way)."""

    name: str
    status: str
    seconds: float
    body: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _run_part(name: str, body) -> Part:
    """Run ``body()`` → (status, text).  A missing module (``ModuleNotFoundError`` from the
    part's imports) is "not available"; any other exception is "failed" with its traceback
    (one part's failure must not stop the others)."""
    start = time.perf_counter()
    try:
        status, text = body()
    except ModuleNotFoundError as exc:
        status, text = "not available", (f"{exc.name} not installed; install the project with its "
                                         "extras: pip install torch==2.13.0 -e '.[all]'")
    except Exception:
        status, text = "failed", _tail(traceback.format_exc())
    return Part(name, status, time.perf_counter() - start, text)


def _tail(text: str, lines: int = 60) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "```\n" + "\n".join(kept) + "\n```" if kept else "(no output)"


def prove_part(out_dir: str) -> Part:
    """``prove --quick`` through proofs_check.runner (its markdown also written to prove.md)."""
    def body():
        from spectr_gbv.proofs_check.runner import markdown, prove

        def progress(r):
            log(f"prove: claim {r.id} {r.verdict} ({r.seconds:.0f} s)")

        text = markdown(prove("quick", progress=progress), "spectr-gbv prove --quick")
        with open(os.path.join(out_dir, "prove.md"), "w") as fh:
            fh.write(text)
        return "passed", text.split("\n", 1)[1]  # drop its top-level title

    return _run_part("prove --quick", body)


def certify_part(out_dir: str) -> Part:
    """``certify verifiers --quick`` over every registered rule through gpu_backend.certify.verifiers (its
    markdown also written to certify.md); failed unless every case is as expected."""
    def body():
        from spectr_gbv.reference.rules import registry

        from spectr_gbv.certify.verifiers import run as certification

        def progress(row):
            log(f"certify: {row.verdict} {row.case} (N = {row.n}, {row.seconds:.0f} s)")

        cert = certification.certify_rules(list(registry.names()), quick=True, progress=progress)
        text = certification.markdown(cert, "spectr-gbv certify verifiers --quick")
        with open(os.path.join(out_dir, "certify.md"), "w") as fh:
            fh.write(text)
        return ("passed" if cert.ok else "failed"), text

    return _run_part("certify", body)


def third_party_part(out_dir: str) -> Part:
    """The third-party verifiers through the public harness (markdown also in third_party.md)."""
    def body():
        from spectr_gbv.gpu_backend.adapters.third_party import certify_all, markdown, ok

        def progress(result):
            log(f"third-party: {result.verdict} {result.name} (N = {result.n}, {result.seconds:.0f} s)")

        results = certify_all(progress=progress)
        text = markdown(results)
        with open(os.path.join(out_dir, "third_party.md"), "w") as fh:
            fh.write(text + "\n")
        return ("passed" if ok(results) else "failed"), text

    return _run_part("third-party verifiers", body)


def vllm_part(out_dir: str) -> Part:
    """vLLM's samplers through ``certify samplers vllm`` in the vLLM environment (module
    doc, part 4); its markdown also in vllm.md."""
    from spectr_gbv.certify.samplers import vllm as vc

    python = sys.executable if vc.importable_here() else vc.locate_python()
    if python is None:
        return Part(TITLES["vllm"], "not installed", 0.0,
                    "No vLLM environment here, so vLLM's samplers were not certified in this report "
                    "(`scripts/install.sh --vllm` makes one; README, \"vLLM's samplers\", has the last full table).")

    def body():
        import subprocess

        path = os.path.join(out_dir, "vllm.md")
        env = dict(os.environ, PYTHONPATH=vc.checkout_root())
        done = subprocess.run([python, "-m", "spectr_gbv", "certify", "samplers", "vllm", "--samples",
                               str(VLLM_REPORT_N), "--families", VLLM_REPORT_FAMILIES, "--markdown", path],
                              env=env, stdout=subprocess.DEVNULL)
        if not os.path.exists(path):
            return "failed", f"certify samplers vllm exited {done.returncode} without a table"
        with open(path) as fh:
            text = fh.read()
        return ("passed" if done.returncode == 0 else "failed"), text

    return _run_part(TITLES["vllm"], body)


def engine_part(out_dir: str) -> Part:
    """``certify our-engine --quick`` through gpu_backend.certify.engine (also in engine.md)."""
    def body():
        from spectr_gbv.certify.our_engine import certificate as ec

        def progress(row):
            power = f", power {row.power:.6f}" if row.power == row.power else ""
            log(f"engine: {row.verdict} {row.rule} (N = {row.n}, {row.iterations} iterations{power}, "
                f"{row.seconds:.0f} s)")

        cert = ec.quick_certification(progress=progress, log=lambda m: log(f"engine: {m}"))
        text = "\n".join([cert.setup + ".", "", "```", ec.text_table(cert.rows), "```", "",
                          f"**{ec.summary(cert)}**"])
        with open(os.path.join(out_dir, "engine.md"), "w") as fh:
            fh.write(text + "\n")
        return ("passed" if cert.ok else "failed"), text

    return _run_part("engine certificate", body)


def bench_part(args, out_dir: str) -> Part:
    start = time.perf_counter()
    try:
        from spectr_gbv.gpu_backend.models.pair import set_threads
        from spectr_gbv.gpu_backend.bench.config import BenchConfig
        from spectr_gbv.gpu_backend.bench.render import markdown_table, write_bar_plot
        from spectr_gbv.gpu_backend.bench.run import run_bench
        from spectr_gbv.gpu_backend.tuning.dtype_probe import resolve as resolve_dtype

        set_threads(args.threads)
        config = BenchConfig(prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                             target=args.target, draft=args.draft, dtype=resolve_dtype(args.dtype)[0])
        tty = sys.stderr.isatty()
        result = run_bench(config, progress=tty, log=None if tty else (lambda m: log(f"bench: {m}")))
        plot = write_bar_plot(result.rows, os.path.join(out_dir, "plots"))
        rows = {r["method"]: r for r in result.rows}
        peak = max(r["peak_rss_gb"] for r in result.rows)
        checks = targets(rows, peak)
        lines = [
            f"{result.meta['models']}; {config.dataset}, {result.meta['prompts']} prompts, "
            f"{config.max_new_tokens} new tokens, T = {config.temperature}, K = {config.K}, "
            f"L = {config.L}.  Machine: {result.meta['machine']}.  {result.meta['date']}.",
            "", markdown_table(result.rows), "",
            f"![block efficiency and speedup ratio](plots/{os.path.basename(plot)})", "",
            "| target | value | met |", "|---|---|---|",
        ]
        lines += [f"| {name} | {value} | {'yes' if ok else '**no**'} |" for name, value, ok in checks]
        lines += ["", "Medians over prompts.  Only the memory limit decides this part's status; "
                  "the speed targets need the full benchmark (benchmarks/RESULTS.md) to be judged."]
        status = "passed" if peak < PEAK_RSS_LIMIT_GB else "failed"
        return Part("bench (short)", status, time.perf_counter() - start, "\n".join(lines))
    except Exception:
        return Part("bench (short)", "failed", time.perf_counter() - start,
                    _tail(traceback.format_exc()))


def targets(rows: dict, peak_gb: float) -> list[tuple[str, str, bool]]:
    """The benchmark's speedup and block-efficiency targets as (name, value, met) triples."""
    def get(method, key):
        return rows[method][key] if method in rows else float("nan")

    sr_kseq, sr_hf = get("kseq_gbv", "speedup_ratio"), get("hf_assisted", "speedup_ratio")
    be_sd, be_bv = get("sd", "block_efficiency"), get("bv", "block_efficiency")
    return [
        ("K-SEQ-GBV speedup ratio ≥ 1.4", f"{sr_kseq:.2f}", sr_kseq >= 1.4),
        ("K-SEQ-GBV speedup ratio ≥ hf_assisted's", f"{sr_kseq:.2f} vs {sr_hf:.2f}", sr_kseq >= sr_hf),
        ("block efficiency SD ≤ BV", f"{be_sd:.2f} vs {be_bv:.2f}", be_sd <= be_bv),
        (f"peak RSS < {PEAK_RSS_LIMIT_GB:g} GB", f"{peak_gb:.2f} GB", peak_gb < PEAK_RSS_LIMIT_GB),
    ]


def run(args: argparse.Namespace) -> int:
    os.makedirs(args.out, exist_ok=True)
    parts, not_run = [], []
    for name, fn in (("prove", lambda: prove_part(args.out)),
                     ("certify", lambda: certify_part(args.out)),
                     ("third_party", lambda: third_party_part(args.out)),
                     ("vllm", lambda: vllm_part(args.out)),
                     ("engine", lambda: engine_part(args.out)),
                     ("bench", lambda: bench_part(args, args.out))):
        if name in FULL_ONLY and not args.full:
            not_run.append(TITLES[name])
            parts.append(Part(TITLES[name], "not run", 0.0, "not run: needs `spectr-gbv report --full`"))
            continue
        if name in args.skip:
            parts.append(Part(TITLES[name], "skipped", 0.0, "skipped on request"))
            continue
        log(f"running {name} ...")
        part = fn()
        log(f"{name}: {part.status} ({part.seconds:.0f} s)")
        parts.append(part)
    ok = all(p.passed for p in parts if p.status not in ("not run", "not installed"))
    lines = ["# spectr-gbv report", "",
             f"Overall: **{'PASSED' if ok else 'NOT PASSED'}**" + (" (the parts run)" if not_run else ""), ""]
    if not_run:
        lines += [f"Not run: {', '.join(not_run)} — `spectr-gbv report --full` runs them.", ""]
    lines += ["| part | status | seconds |", "|---|---|---|"]
    lines += [f"| {p.name} | {p.status} | {p.seconds:.0f} |" for p in parts]
    for p in parts:
        if p.status != "not run":
            lines += ["", f"## {p.name}: {p.status}", "", p.body]
    path = os.path.join(args.out, "REPORT.md")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    if not_run:
        print(f"not run: {', '.join(not_run)} (spectr-gbv report --full runs them)")
    print(f"wrote {path}; overall {'passed' if ok else 'NOT passed'}")
    return 0 if ok else 1
