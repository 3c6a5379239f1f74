"""``spectr-gbv certify endpoint URL``: certify a deployment through its own API.

    spectr-gbv certify endpoint URL [--model NAME] [--server openai|sglang|tgi|llama.cpp]
        [--reference self|reported|endpoint:URL|hf:NAME_OR_PATH|gguf:PATH] [--prompts FILE]
        [--audit FRACTION] [--audit-reference self|endpoint:URL]
        [--as-client [--request-template FILE]] [--top-p P] [--min-p M] [--sampling-top-k K] [--vocab V]
        [--samples N | --max-samples N --max-time S] [--max-new-tokens n] [--temperature T]
        [--top-k k] [--concurrency C]
        [--alpha A] [--tolerance ETA|auto] [--logprob-tolerance NATS] [--seed S] [--power]
        [--record FILE | --resume FILE] [--json FILE|-] [--api-key-env VAR] [--insecure]
        [--timeout S] [--retries R] [--max-rps R] [--threads T]

The library is certify/endpoint/ (``endpoint.certify_endpoint``); this module only
parses and prints.  The default plan is sequential (certify/endpoint/sequential.py); a PASS whose
budget ended before every target was resolved is still 0, its verdict line saying what was not.
Exit status: 0 PASS, 1 FAIL, 2 bad input, an unreachable server, or a run that
could not finish (INCOMPLETE, REFUSED), 130 stopped by Ctrl-C or SIGTERM (the samples so far are
kept in the run file and the partial result printed).
"""

from __future__ import annotations

import argparse
import sys

DEFAULTS = dict(samples=80, max_samples=1280, max_time=600.0, max_new_tokens=16, top_k=20, concurrency=8, alpha=1e-3, tolerance=1e-3,
                logprob_tolerance=1.0)


def register(sub) -> None:
    """Add ``endpoint`` to the ``certify`` sub-commands (``sub``: their subparsers action)."""
    from spectr_gbv.cli.args import (add_json_flag, existing_file, nonneg_int, output_file, positive_float,
                                    positive_int, positive_temperature_value, probability_value, seed_int,
                                    top_p_value, unit_interval_open)

    p = sub.add_parser(
        "endpoint", help="certify a deployment (an OpenAI-compatible, SGLang, TGI or llama.cpp server) "
        "through its own API, against its own prompt log-probabilities or another reference",
        description="Samples continuations from the server with speculation as deployed (by default until "
        "they resolve temperature, truncation and omnibus targets at power 0.99, or a budget ends; "
        "--samples N: a fixed N), asks the "
        "reference for the target's law of every sampled token, and tests the samples (omnibus "
        "randomized-PIT tests and directional tests for temperature, truncation and stale logits; "
        "Bonferroni over the family) and the server's reported log-probabilities.  The reference "
        "'self' is the server's own prompt log-probabilities (no local weights; top-k laws).  Every "
        "sample is appended to a run file as it arrives; --resume continues a stopped run.  Exit "
        "0 PASS, 1 FAIL, 2 bad input / unreachable server / incomplete run, 130 stopped.")
    p.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000 (an OpenAI base URL "
                   "ending in /v1 is accepted), on this machine or another")
    p.add_argument("--model", default=None, help="the request's model field (default: the server's first "
                   "model at /v1/models)")
    p.add_argument("--server", default="openai", choices=("openai", "sglang", "tgi", "llama.cpp"),
                   help="the server's API: openai (vLLM and OpenAI-compatible completions; default), sglang "
                   "(native /generate), tgi (text-generation-inference), llama.cpp (llama-server's /completion)")
    p.add_argument("--reference", default="self", help="where the target's law comes from: self (the server's "
                   "own prompt log-probabilities; default), reported (the top-k log-probabilities the sampling answer "
                   "itself reports: one request a sample, audited by prefill, --audit), endpoint:URL (a second deployment, speculation off), "
                   "hf:NAME_OR_PATH (a local transformers model: an embedded name, a folder, a .gguf), "
                   "gguf:PATH (a local GGUF on llama.cpp)")
    p.add_argument("--prompts", type=existing_file, default=None, help="JSONL prompts, one object per line "
                   "with text (text/prompt/instruction) or token ids (ids/token_ids/input_ids); default: a "
                   "shipped set of 8 varied prompts")
    p.add_argument("--samples", type=positive_int, default=None,
                   help="a fixed plan of N samples, one look at alpha (default: the sequential plan: a pilot of "
                   f"{DEFAULTS['samples']} samples, then doubling, until the samples resolve temperature |dbeta| <= "
                   "0.05, a truncation of 1%% of the mass (top-p 0.99) and an omnibus per-token TV of 0.05 at power "
                   "0.99, a look fails, or --max-samples / --max-time end it; the verdict says what was resolved; "
                   "valid under optional stopping: docs/guarantees.md)")
    p.add_argument("--max-samples", dest="max_samples", type=positive_int, default=None,
                   help=f"the sequential plan's sample budget (default {DEFAULTS['max_samples']}: looks at 80, 160, "
                   "320, 640, 1280)")
    p.add_argument("--max-time", dest="max_time", type=positive_float, default=None,
                   help=f"the sequential plan's time budget in seconds (default {DEFAULTS['max_time']:g}); the "
                   "samples collected by then are tested")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=positive_int, default=DEFAULTS["max_new_tokens"],
                   help=f"tokens per sample (default {DEFAULTS['max_new_tokens']})")
    p.add_argument("--temperature", type=positive_temperature_value, default=1.0,
                   help="the sampling temperature T (default 1; T != 1 needs --reference hf: or gguf:)")
    p.add_argument("--as-client", dest="as_client", action="store_true",
                   help="send the requests as the client sends them: no sampling field (or the fields of "
                   "--request-template), and test against the law declared by --temperature, --top-p, "
                   "--sampling-top-k, --min-p (default: the OpenAI defaults, T 1, no truncation); from a top-k "
                   "reference the declared law is exact where the truncation lies inside the top k and bounded "
                   "otherwise (docs/guarantees.md)")
    p.add_argument("--request-template", dest="request_template", type=existing_file, default=None,
                   help="with --as-client: a JSON request body as the client sends it; prompt, max_tokens, seed and "
                   "logprobs are filled in")
    p.add_argument("--top-p", dest="top_p", type=top_p_value, default=1.0,
                   help="the declared top-p (default 1: none)")
    p.add_argument("--min-p", dest="min_p", type=probability_value, default=0.0,
                   help="the declared min-p (default 0: none)")
    p.add_argument("--sampling-top-k", dest="sampling_top_k", type=nonneg_int, default=0,
                   help="the declared top-k truncation (default 0: none; --top-k is the reference's alternatives)")
    p.add_argument("--vocab", type=nonneg_int, default=0,
                   help="the model's vocabulary size V: a declared T > 1 from top-k lists bounds the unlisted mass "
                   "with it (default 0: unknown; such positions are skipped)")
    p.add_argument("--audit", type=probability_value, default=None,
                   help="with --reference reported: the fraction of samples re-scored by prefill (default 0.1, at "
                   "least 8 samples; 0: no audit)")
    p.add_argument("--audit-reference", dest="audit_reference", default=None,
                   help="with --reference reported: the audit's prefill reference, self (default) or endpoint:URL")
    p.add_argument("--top-k", dest="top_k", type=positive_int, default=DEFAULTS["top_k"],
                   help=f"alternatives per position asked of a server reference (default {DEFAULTS['top_k']}; "
                   "vLLM caps it at its --max-logprobs, 20 by default)")
    p.add_argument("--concurrency", type=positive_int, default=DEFAULTS["concurrency"],
                   help=f"the most requests in flight (default {DEFAULTS['concurrency']}; the server batches them); "
                   "halved when requests time out or the server answers 429/503/504, grown back on success")
    p.add_argument("--alpha", type=unit_interval_open, default=DEFAULTS["alpha"],
                   help=f"the test family's false-alarm rate (default {DEFAULTS['alpha']:g})")
    p.add_argument("--tolerance", type=tolerance_value, default=DEFAULTS["tolerance"],
                   help=f"eta: per-token TV put down to float rounding (default {DEFAULTS['tolerance']:g}), or "
                   "'auto': measured from the gaps between the engine's reported log-probabilities and the "
                   "reference's (the verdict then says whether a deviation is within this deployment's numerics)")
    p.add_argument("--power", action="store_true",
                   help="print what this plan (N x n) detects with power 0.99, scaled from a pilot of its first 16 "
                   "samples (kept in the run file: --resume continues), and the samples an omnibus per-token TV "
                   "of 0.02 needs with their expected time; no verdict")
    p.add_argument("--logprob-tolerance", dest="logprob_tolerance", type=positive_float,
                   default=DEFAULTS["logprob_tolerance"], help="the largest gap in nats allowed between a "
                   f"reported and a reference log-probability (default {DEFAULTS['logprob_tolerance']:g})")
    p.add_argument("--seed", type=seed_int, default=0, help="the run's seed (engine seeds and the test's uniforms)")
    p.add_argument("--record", type=output_file, default=None, help="the run file the samples are appended to "
                   "(default: spectr-gbv-certify-HOST-PORT-DATE.jsonl here)")
    p.add_argument("--resume", type=existing_file, default=None, help="continue the run in this run file "
                   "(same plan), asking only for the samples it lacks")
    add_json_flag(p, "the certificate")
    p.add_argument("--api-key-env", dest="api_key_env", default="OPENAI_API_KEY",
                   help="the environment variable holding the API key, sent as a bearer token, never printed "
                   "or stored (default OPENAI_API_KEY); sent off this machine only over https unless --insecure")
    p.add_argument("--insecure", action="store_true",
                   help="send the API key over plain http to a host that is not this machine (refused otherwise)")
    p.add_argument("--timeout", type=positive_float, default=120.0, help="seconds per request (default 120)")
    p.add_argument("--retries", type=nonneg_int, default=4, help="further tries of a request that fails with "
                   "HTTP 429 or 5xx, a timeout or a body that is not JSON (default 4, backing off 1, 2, 4, 8 s; a "
                   "retry waits for a slot like any request)")
    p.add_argument("--max-rps", dest="max_rps", type=positive_float, default=None,
                   help="the most requests started per second on each server (default: no cap)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="CPU threads of a local reference (torch, llama.cpp; default 1)")
    p.set_defaults(func=run, check=check)


def tolerance_value(text: str):
    """``--tolerance``: a number in [0, 1) or "auto"."""
    if text == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1) or 'auto', got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1) or 'auto', got {text!r}")
    return value


def check(args: argparse.Namespace) -> None:
    """Cross-flag checks before anything is contacted; threads set before any model loads."""
    import os

    from spectr_gbv.cli.args import UsageError

    if args.request_template and not args.as_client:
        raise UsageError("--request-template: it shapes the requests of --as-client; add --as-client")
    if args.audit is not None and args.reference.strip() != "reported":
        raise UsageError("--audit: the audit re-scores the samples of --reference reported; add --reference reported")
    if args.min_p >= 1:
        raise UsageError(f"--min-p must be in [0, 1), got {args.min_p:g}")
    if args.record and args.resume:
        raise UsageError("--record and --resume: give one (--resume appends to the file it continues)")
    if args.samples is not None and (args.max_samples is not None or args.max_time is not None):
        raise UsageError("--samples N fixes the plan; --max-samples and --max-time are the sequential (default) "
                         "plan's budget: give one or the other")
    if args.max_samples is not None and args.max_samples < DEFAULTS["samples"]:
        raise UsageError(f"--max-samples {args.max_samples}: the sequential plan's pilot is {DEFAULTS['samples']} "
                         f"samples; give at least that, or --samples {args.max_samples} for a fixed plan")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        pass


def request_from(args: argparse.Namespace):
    from spectr_gbv.certify.endpoint.endpoint import EndpointRequest
    from spectr_gbv.certify.endpoint.run import Plan

    auto = args.tolerance == "auto"
    sequential = args.samples is None
    budget = dict(sequential=sequential,
                  max_samples=args.max_samples if args.max_samples is not None else DEFAULTS["max_samples"],
                  max_time_s=args.max_time if args.max_time is not None else DEFAULTS["max_time"])
    template = None
    if args.request_template:
        import json

        from spectr_gbv.cli.args import UsageError

        try:
            with open(args.request_template, encoding="utf-8") as f:
                template = json.load(f)
        except (OSError, ValueError) as err:
            raise UsageError(f"--request-template {args.request_template}: not a JSON body ({err})") from None
        if not isinstance(template, dict):
            raise UsageError(f"--request-template {args.request_template}: a JSON object is needed, got "
                             f"{type(template).__name__}")
    plan = Plan(n_samples=DEFAULTS["samples"] if sequential else args.samples, n_new=args.max_new_tokens,
                temperature=args.temperature, k=args.top_k, **budget, top_p=args.top_p,
                sampling_top_k=args.sampling_top_k, min_p=args.min_p, as_client=args.as_client, template=template,
                reported=args.reference.strip() == "reported",
                audit=0.1 if args.audit is None else args.audit, vocab=args.vocab,
                alpha=args.alpha, tolerance=DEFAULTS["tolerance"] if auto else args.tolerance, auto_tolerance=auto,
                logprob_tolerance=args.logprob_tolerance, seed=args.seed, concurrency=args.concurrency)
    return EndpointRequest(url=args.url, model=args.model, server=args.server, reference=args.reference,
                           prompts=args.prompts, plan=plan, record=args.record, resume=args.resume,
                           api_key_env=args.api_key_env, insecure=args.insecure, timeout_s=args.timeout,
                           retries=args.retries, max_rps=args.max_rps, audit_reference=args.audit_reference)


def run(args: argparse.Namespace) -> int:
    import signal

    from tqdm.auto import tqdm

    from spectr_gbv.cli.args import UsageError, text_stream, write_json
    from spectr_gbv.certify.endpoint.endpoint import (DeploymentInputError, certify_endpoint,
                                                                    power_endpoint)
    from spectr_gbv.certify.endpoint.report import text_report

    def log(line):
        tqdm.write(f"certify endpoint: {line}", file=sys.stderr)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    def bar(total):
        return tqdm(total=total, desc="certify endpoint", unit="sample", file=sys.stderr, dynamic_ncols=True,
                    mininterval=0.5 if sys.stderr.isatty() else 10.0)

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        if args.power:
            print(power_endpoint(request_from(args), progress=bar, log=log), file=text_stream(args))
            return 0
        cert = certify_endpoint(request_from(args), progress=bar, log=log)
    except DeploymentInputError as err:
        raise UsageError(str(err)) from None
    finally:
        signal.signal(signal.SIGTERM, old)
    print(text_report(cert), file=text_stream(args))
    write_json(args.json_file, cert.to_json())
    stopped = any(n.startswith("stopped by the user") for n in cert.notes)
    if cert.verdict == "PASS":
        return 0
    if cert.verdict == "FAIL":
        return 1
    return 130 if stopped else 2
