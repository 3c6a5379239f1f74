"""``spectr-gbv certify log FILE``: certify recorded traffic (one {"request", "response"} JSON a line).

    spectr-gbv certify log FILE [--lines START:STOP] [--first-line N] [--out PARTIAL.json]
        [--resume PARTIAL.json] [--alpha A] [--tolerance ETA] [--seed S] [--vocab V]
        [--max-bound B] [--workers W] [--audit URL [--audit-fraction F] [--audit-samples M] [--model NAME]]
        [--json FILE|-]
    spectr-gbv certify log --merge PARTIAL.json [PARTIAL.json ...] [--json FILE|-]

The library is certify/log/ (``run.certify_log``, ``run.merge_files``); this module only parses
and prints.  A shard of a log is certified with ``--lines`` (or a split piece with
``--first-line``) and ``--out``; ``--merge`` combines the shards' partial results into the
certificate one pass over the whole log gives.  Exit status: 0 PASS, 1 FAIL, 2 bad input, no
token tested (NO DATA) or an incomplete run, 130 stopped by Ctrl-C or SIGTERM (the partial result
so far is written to --out).
"""

from __future__ import annotations

import argparse
import sys


def lines_range(text: str) -> tuple[int, int | None]:
    """``START:STOP`` (either may be empty: 0 and the end) → (start, stop)."""
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start = int(parts[0]) if parts[0] else 0
        stop = int(parts[1]) if parts[1] else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be START:STOP (0-based line numbers, STOP excluded), "
                                         f"got {text!r}") from None
    if start < 0 or (stop is not None and stop <= start):
        raise argparse.ArgumentTypeError(f"must have 0 <= START < STOP, got {text!r}")
    return start, stop


def register(sub) -> None:
    """Add ``log`` to the ``certify`` sub-commands (``sub``: their subparsers action)."""
    from spectr_gbv.cli.args import (add_json_flag, existing_file, nonneg_int, output_file, positive_int, seed_int,
                                    unit_interval_open)

    p = sub.add_parser(
        "log", help="certify recorded traffic: a JSONL log of /v1/completions requests and the server's answers "
        "with top-k log-probabilities, against the law each request asked for",
        description="Reads a log, one JSON object a line: {\"request\": the /v1/completions body as sent, "
        "\"response\": the server's answer} with choices[].logprobs (tokens, token_logprobs, top_logprobs; vLLM's "
        "\"token_id:N\" keys or text).  Each request's own temperature, top_p, top_k and min_p define its law, "
        "computed from the answer's reported top-k log-probabilities (exact where the list resolves it, with "
        "stated bounds otherwise, else a counted skip); the samples are tested by certify endpoint's family "
        "(omnibus PIT, temperature, truncation, position shift, the top-k lists' other cell).  Streamed in "
        "bounded memory.  Shards: --lines/--first-line with --out, then --merge.  Exit 0 PASS, 1 FAIL, 2 bad "
        "input / no data / incomplete, 130 stopped.")
    p.add_argument("file", metavar="FILE", nargs="?", type=existing_file, default=None,
                   help="the log (JSONL); omit it with --merge")
    p.add_argument("--merge", nargs="+", metavar="PARTIAL", type=existing_file, default=None,
                   help="combine shards' partial results (--out files) into one certificate; no FILE")
    p.add_argument("--lines", type=lines_range, default=(0, None), metavar="START:STOP",
                   help="certify only lines START..STOP-1 of FILE (0-based; a shard of a log read whole)")
    p.add_argument("--first-line", dest="first_line", type=nonneg_int, default=0, metavar="N",
                   help="FILE's first line is line N of the whole log (a piece of a split log); default 0")
    p.add_argument("--out", type=output_file, default=None, metavar="PARTIAL.json",
                   help="write the partial result (the tests' sums; every 30 s and at the end) for --merge or "
                   "--resume")
    p.add_argument("--resume", type=existing_file, default=None, metavar="PARTIAL.json",
                   help="continue the certificate in this partial result: a stopped run, or the same FILE grown "
                   "since (only the new lines are read; the certificate's next look, its false-alarm rate kept "
                   "over all looks); same FILE, lines and settings; written back to it unless --out is given")
    p.add_argument("--alpha", type=unit_interval_open, default=1e-3,
                   help="the family's false-alarm rate (default 1e-3)")
    p.add_argument("--tolerance", type=float, default=1e-3, metavar="ETA",
                   help="per-token TV put down to numerics, in [0, 1) (default 1e-3)")
    p.add_argument("--seed", type=seed_int, default=0, help="the PIT uniforms' seed (default 0; shards must agree)")
    p.add_argument("--vocab", type=nonneg_int, default=0, metavar="V",
                   help="the model's vocabulary size: requests with T > 1 need it unless their lists cover the law")
    p.add_argument("--max-bound", dest="max_bound", type=unit_interval_open, default=1e-3, metavar="B",
                   help="skip positions whose law, computed from the list, is bounded no tighter than TV B beyond "
                   "the list's precision (default 1e-3)")
    p.add_argument("--audit", default=None, metavar="URL",
                   help="re-score a subsample of the samples by prefill against this running server (an "
                   "OpenAI-compatible completions API with echo log-probs): catches a server that reports the law it "
                   "wrongly samples from, which the log alone cannot; at its own alpha")
    p.add_argument("--audit-fraction", dest="audit_fraction", type=unit_interval_open, default=0.1, metavar="F",
                   help="the share of lines audited (a hash of the line: the same in every shard; default 0.1)")
    p.add_argument("--audit-samples", dest="audit_samples", type=positive_int, default=64, metavar="M",
                   help="at most M samples audited (default 64)")
    p.add_argument("--model", default=None, help="the audit's model field (default: each logged request's own)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="W",
                   help="worker processes (default 1; 2 on 2 cores roughly doubles the throughput)")
    add_json_flag(p, "the certificate")
    p.set_defaults(func=run)


def check(args: argparse.Namespace) -> None:
    """Raises UsageError naming the first bad argument (the combinations argparse cannot see)."""
    from spectr_gbv.cli.args import UsageError

    if args.merge and args.file:
        raise UsageError("give FILE or --merge PARTIAL..., not both")
    if not args.merge and not args.file:
        raise UsageError("FILE is required (or --merge PARTIAL.json ...)")
    if args.merge and (args.out or args.resume or args.lines != (0, None) or args.first_line or args.audit):
        raise UsageError("--merge: --out, --resume, --lines, --first-line and --audit belong to a run over FILE")
    if not 0 <= args.tolerance < 1:
        raise UsageError(f"--tolerance must be in [0, 1), got {args.tolerance!r}")


def run(args: argparse.Namespace) -> int:
    import os
    import signal

    from tqdm.auto import tqdm

    from spectr_gbv.certify.endpoint.client import EndpointError
    from spectr_gbv.certify.log.report import text_report
    from spectr_gbv.certify.log.run import LogPlan, certify_log, merge_files
    from spectr_gbv.cli.args import UsageError, text_stream, write_json

    check(args)
    from spectr_gbv.certify.log.allocator import keep_freed_memory

    # this command's process runs chunks (one worker) or pickles the workers' (certify/log/allocator.py);
    # the library leaves a caller's process as it is
    keep_freed_memory()
    plan = LogPlan(alpha=args.alpha, tolerance=args.tolerance, seed=args.seed, vocab=args.vocab,
                   max_bound=args.max_bound, workers=args.workers)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        if args.merge:
            cert = merge_files(args.merge, plan)
        else:
            with tqdm(total=os.path.getsize(args.file), desc="certify log", unit="B", unit_scale=True,
                      file=sys.stderr, dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10.0) as bar:
                cert = certify_log(args.file, plan, start=args.lines[0], stop=args.lines[1],
                                   first_line=args.first_line, out=args.out, resume=args.resume, progress=bar)
            if args.audit and cert.complete:
                from spectr_gbv.certify.log.audit import audit_log

                cert.audit = audit_log(args.file, plan, args.audit, fraction=args.audit_fraction,
                                       max_samples=args.audit_samples, model=args.model, start=args.lines[0],
                                       stop=args.lines[1], first_line=args.first_line, look=cert.look)
                partial = args.out or args.resume
                if cert.audit.failed and partial and cert.looks:  # the look's verdict, audit included
                    from spectr_gbv.certify.log.run import mark_last_look_failed

                    cert.looks[-1]["verdict"] = "FAIL"
                    mark_last_look_failed(partial)
                if cert.audit.incomplete:
                    cert.complete = False
                    cert.notes.append(f"the audit re-scored no sample: {cert.audit.errors} requests failed")
    except ValueError as err:
        raise UsageError(str(err)) from None
    except EndpointError as err:  # the audit's server
        raise UsageError(f"--audit: {err}") from None
    finally:
        signal.signal(signal.SIGTERM, old)
    print(text_report(cert), file=text_stream(args))
    write_json(args.json_file, cert.to_json())
    if cert.verdict == "PASS":
        return 0
    if cert.verdict == "FAIL":
        return 1
    stopped = any(n.startswith("stopped by the user") for n in cert.notes)
    return 130 if stopped else 2
