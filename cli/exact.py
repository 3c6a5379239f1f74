"""``spectr-gbv exact``: exact E[τ], block efficiency and TV to the target for one rule."""

from __future__ import annotations

import argparse
import json
import math


def register(subparsers) -> None:
    from spectr_gbv.cli.args import add_json_flag, existing_file, positive_int
    from spectr_gbv.reference.rules import RULES
    from spectr_gbv.reference.sizes import DEFAULT_MAX_OUTCOMES

    p = subparsers.add_parser(
        "exact",
        help="exact E[tau], block efficiency and TV of the first N emitted tokens to the target",
        description="Exact law of a verification rule on toy models given as model files "
        '{"vocab_size": V, "conditionals": {"": [...], "0,1": [...]}} (prefix of token ids -> '
        "next-token probabilities; a missing prefix falls back to its longest listed suffix).  "
        "Sizes whose enumeration exceeds --max-outcomes are refused up front with the estimate.",
    )
    p.add_argument("--rule", required=True, choices=list(RULES), metavar="RULE",
                   help=", ".join(RULES))
    p.add_argument("--K", type=positive_int, required=True, help="number of drafts (>= 1)")
    p.add_argument("--L", type=positive_int, required=True, help="block length (>= 1)")
    p.add_argument("--draft", type=existing_file, required=True, help="draft model file (JSON)")
    p.add_argument("--target", type=existing_file, required=True, help="target model file (JSON)")
    p.add_argument("--tokens", type=positive_int, default=None, help="N emitted tokens for the TV (default L + 2)")
    p.add_argument("--cap", action="store_true",
                   help="cap each block at the tokens still needed, as the engine does (S = max(1, min(L, N - n - 1)); "
                   "proofs_check/BLOCK_CAP.md)")
    p.add_argument("--max-outcomes", type=positive_int, default=DEFAULT_MAX_OUTCOMES,
                   help="refuse when the estimated enumeration (draft configurations over all decode "
                   f"states, plus target sequences) exceeds this (default {DEFAULT_MAX_OUTCOMES:,})")
    add_json_flag(p, "one JSON object with the exact values")
    p.set_defaults(func=run, check=check)


def load_model_arg(flag: str, path: str):
    """The model file of ``flag`` (``--draft`` / ``--target``).

    Raises:
        UsageError: ``FLAG FILE: problem`` on an unreadable, non-JSON or malformed file.
    """
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.reference.models import load_model_file

    try:
        return load_model_file(path)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {path}: not valid JSON ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag} {path}: cannot read ({exc})") from None
    except RecursionError:
        raise UsageError(f"{flag} {path}: nested too deeply to parse (a model file is an object of "
                         "flat lists)") from None
    except (ValueError, OverflowError, TypeError) as exc:
        raise UsageError(f"{flag} {path}: {exc}") from None


def load_model_pair(args: argparse.Namespace):
    """(draft, target) from ``--draft`` and ``--target``, on the same vocabulary."""
    from spectr_gbv.cli.args import UsageError

    draft = load_model_arg("--draft", args.draft)
    target = load_model_arg("--target", args.target)
    if draft.vocab_size != target.vocab_size:
        raise UsageError(f"--draft {args.draft} has V = {draft.vocab_size} but --target {args.target} "
                         f"has V = {target.vocab_size}: the vocabularies must match")
    return draft, target


def check(args: argparse.Namespace) -> None:
    """Before any work: the model files, K against single-draft rules, and the size of the
    enumeration (refused above --max-outcomes with the estimate)."""
    from spectr_gbv.cli.args import UsageError, usage_errors
    from spectr_gbv.reference.rules.policy import check_draft_count
    from spectr_gbv.reference.sizes import exact_outcomes, format_log10

    with usage_errors():
        check_draft_count(args.rule, args.K, "--K")
    args.draft_model, args.target_model = load_model_pair(args)
    n_tokens = args.tokens if args.tokens is not None else args.L + 2
    lg, how = exact_outcomes(args.draft_model, args.target_model, args.K, args.L, n_tokens)
    if lg > math.log10(args.max_outcomes):
        raise UsageError(
            f"--K {args.K} --L {args.L} (N = {n_tokens} tokens, V = {args.target_model.vocab_size}) is too large "
            f"to enumerate: about {format_log10(lg)} outcomes ({how}), above --max-outcomes "
            f"{args.max_outcomes:,}; raise --max-outcomes to run it anyway")


def run(args: argparse.Namespace) -> int:
    from spectr_gbv.cli.args import UsageError, text_stream, write_json
    from spectr_gbv.reference.exact import exact_summary

    if getattr(args, "draft_model", None) is None:  # check() not run (a direct call)
        check(args)
    n_tokens = args.tokens if args.tokens is not None else args.L + 2
    try:
        res = exact_summary(args.rule, args.draft_model, args.target_model, args.K, args.L, n_tokens,
                            cap=args.cap)
    except ValueError as exc:  # e.g. a draft token the target gives no row for
        raise UsageError(f"--draft {args.draft} / --target {args.target}: {exc}") from None
    write_json(args.json_file, res.to_json(), indent=None)
    out = text_stream(args)
    e_tau, tv = res.expected_accepted, res.tv_to_target
    print(f"rule {args.rule}  K={args.K}  L={args.L}", file=out)
    print(f"E[tau] (one iteration)          {e_tau:.12f}", file=out)
    print(f"block efficiency E[tau] + 1     {e_tau + 1:.12f}   (tokens per target call, one iteration)", file=out)
    print(f"TV(first {n_tokens} tokens, target)   {tv:.3e}   "
          f"({'lossless' if res.lossless else 'NOT lossless'} at 1e-12)", file=out)
    print(f"expected target calls for {n_tokens} tokens  {res.expected_target_calls:.12f}"
          f"  ({res.tokens_per_target_call:.6f} tokens per call{', capped blocks' if args.cap else ''})", file=out)
    return 0
