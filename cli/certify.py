"""``spectr-gbv certify WHAT``: certification, one sub-command per thing certified.

    spectr-gbv certify verifiers [--rules R,…] [--quick] [--samples N] [--alpha A] [--seed S] …
    spectr-gbv certify samplers vllm [--samples N] [--families F,…] [--workers W] …
    spectr-gbv certify engine NAME [--modes M,…] [--quick] [--samples N] [--temperature T] …
    spectr-gbv certify our-engine [--rules R,…] [--quick] [--target T] [--draft D] [--backend B] …
    spectr-gbv certify endpoint URL [--reference self|hf:…|gguf:…|endpoint:URL] … (cli/certify_endpoint.py)

Each has its own ``--help``.  The flags of the one-command form below (``certify --quick``,
``--third-party vllm``, ``--engine [NAME]``, ``--engine-endpoint URL``) keep working for one release
and print a one-line deprecation notice naming the sub-command to use.

    spectr-gbv certify [--rules R,…] [--quick] [--json FILE] [--markdown FILE]
                       [--samples N] [--alpha A] [--seed S] [--device D] [--threads T]
    spectr-gbv certify --third-party vllm [--samples N] [--alpha A] [--seed S] [--workers W]
                       [--json FILE] [--markdown FILE]
    spectr-gbv certify --engine transformers|llama-cpp-python|vllm|ours|ours-llama.cpp [--modes M,…]
                       [--quick] [--samples N] [--alpha A] [--max-new-tokens M] [--temperature T]
                       [--seed S] [--json FILE]
    spectr-gbv certify --engine-endpoint URL [--endpoint-model NAME] [--allow-remote] [--samples N]
                       [--temperature T] [--max-new-tokens M] [--json FILE]
    spectr-gbv certify --engine [--rules R,…] [--quick] [--samples N] [--alpha A]
                       [--max-new-tokens M] [--target T] [--draft D] [--draft-temperature TD]
                       [--seed S] [--device D] [--threads T] [--json FILE]

``--engine`` certifies the speculative-decoding ENGINE on a real model instead of the verifier
plan (gpu_backend/certify/engine.py: N seeded generations per rule from one fixed prompt; the
first emitted token G-tested against the target's exact law, every iteration's τ against the
reference rule's exact law of τ given the rows the verifier got; planted wrong rules run
through the engine must be caught).  Default pair: the embedded "tiny" SmolLM2 in float32 as
target at T = 1, itself at T = 1.5 as draft; ``--target/--draft`` take another pair (e.g.
``--target target --draft draft``: the Qwen2.5-Coder pair; its draft then at T = 1 unless
``--draft-temperature``).  Rules: every lossless registered rule but mdbv (``--quick``: the
engine's default rule, sd and gbv, N = 60, and the planted rules of those bases); α = 1e-3
per row unless ``--alpha``.  Measured times and the choice of N: benchmarks/CERTIFY.md.

``--engine NAME`` certifies what an engine's own ``generate`` emits with speculation on, from
outside (gpu_backend/certify/generate.py): N samples from one prompt on the embedded tiny
SmolLM2, each token's randomized PIT under the target's law given its sampled prefix (computed by
a reference copy: transformers on the same weights, or the engine without speculation), tested
for uniformity per position and pooled, in token-id and probability order; the engine's
lossless control (speculation off) must pass and its negative controls (wrapped engines with one
defect each) must fail.  Table and measurements: docs/engines.md.  vLLM's engine runs in the
vLLM environment (``scripts/install.sh --vllm``).

``--third-party vllm`` certifies vLLM's own rejection samplers instead (Model Runner V2
standard, block verification and synthetic; the v1 RejectionSampler; with draft logits and with
one-hot n-gram drafts) on the built-in case families against the rule each claims
(gpu_backend/certify/vllm.py).  Where vLLM is not importable here, it runs in the vLLM
environment of ``scripts/install.sh --vllm`` (``.venv-vllm``, or ``$SPECTR_GBV_VLLM_PYTHON``);
without one it says so and exits 2.  N = 2,000 per case on a CPU (Triton's interpreter),
2·10^4 on a CUDA GPU, unless ``--samples``.

Every rule of the registry (``reference.rules.registry``; or the ``--rules`` subset) is run by
oracle.certify (batched samples with the verifier's own seeded randomness, a G-test of the
joint outcome (τ, accepted prefix, emitted token), of the law of τ, of the emitted token given
(τ, prefix), and the mean of τ against the exact E[τ], each at α/4; on the V = 4,096 rows a
fifth, the coarsened G-test of oracle.coarsen, a sixth, the identity test of oracle.identity,
and each of the six at α/6) on the cases of
gpu_backend/certify/suite.py.  Three kinds of row:

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
* ``planted`` — wrong rules that must be caught: every rule's planted defects (its spec's
  ``planted``, gpu_backend/certify/planted.py: e.g. a shared uniform in SD and BV, first-failure
  stopping in BV and GBV, ρ = 1 in K-SEQ, K-SEQ-GBV and K-SEQ-BV at K = 2, reused coins across
  the drafts in SpecTr-GBV, Traversal and MDBV) against the rule's own exact law, and each lossy
  rule (spectr_gbv, spectr_gbv_fixed) against the target's first-token law at K = L = 2.
  A planted row runs when its base rule is selected.

Each row reports N, α, the smallest total-variation deviation of the whole outcome law detected
with power 0.99 (``detectable δ``: the joint G-test's bound on its pooled cells plus the pooled
mass, oracle.gtest.GTestResult.detectable_tv_law), the deciding test and the case's p-value
(Bonferroni: the number of tests × the smallest of its p-values, the single first-token test's
own p-value), mean τ with its confidence interval against the exact E[τ], and the verdict
(``--json`` adds the pooled mass and the coarsened test's δ on its 64 bins).
Exit status 0 only when every lossless and conformance row passes and every planted row is
caught; 1 otherwise; 2 for bad arguments (e.g. an unknown rule).

Sizes: full run N = 2·10^5 per case at α = 1e-6, except the V = 4,096 rows: 10^6 in float32
and 2·10^6 in bfloat16 (``verifiers.FULL_N_ROWS``), where every lossless rule's case states
δ ≤ 0.02 (at 2·10^5: 0.025-0.082).  ``--quick``: N = 5·10^4 per case (10^5 for
the law-level planted ones), no bfloat16 rows at V = 4,096; every registered rule and every
planted defect is still covered.  ``--samples`` sets N for every case (a law-level planted case
needs N ≳ 3·10^4 to be caught: its first-token TV is 0.024).
"""

from __future__ import annotations

import argparse
import sys
import time

from spectr_gbv.gpu_backend.certify.verifiers import (DEFAULT_ALPHA, FULL_N, FULL_N_ROWS, certify_rules,
                                                      device_unusable, markdown, parse_rules, summary,
                                                      text_table)

# the engines of ``certify --engine NAME`` (gpu_backend.certify.engines.modes.ENGINES, repeated
# so that --help imports nothing heavy; tests/gpu_backend/certify/test_certify_generate_models.py
# checks they agree)
GENERATE_ENGINES = ("transformers", "llama-cpp-python", "vllm", "ours", "ours-llama.cpp")
ENDPOINT_SAMPLES = 200  # --engine-endpoint: samples per run (requests are sequential)
GENERATE_SAMPLES = {"llama-cpp-python": 200, "transformers": 60, "vllm": 200, "ours": 100, "ours-llama.cpp": 100}
GENERATE_QUICK_SAMPLES = 20

# gpu_backend.certify.engine's defaults, repeated here so that --help imports no torch
# (tests/gpu_backend/certify/test_engine_certify.py checks they agree)
ENGINE_ALPHA = 1e-3
ENGINE_MAX_NEW_TOKENS = 16
ENGINE_DRAFT_T = 1.5


# the legacy one-command flags and their defaults: a sub-command sets those it does not take
LEGACY_DEFAULTS = dict(rules=None, quick=False, samples=None, alpha=None, seed=0, device="cpu", threads=1,
                       third_party=None, families=None, workers=2, engine=False, modes=None, max_new_tokens=None,
                       backend=None, target=None, draft=None, draft_temperature=None, engine_endpoint=None,
                       endpoint_model=None, allow_remote=False, temperature=None, json_file=None, markdown=None)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "certify",
        help="certify verifiers, vLLM's samplers, an engine's generate, our engine, or a deployment "
        "(certify verifiers|samplers vllm|engine NAME|our-engine|endpoint URL)",
        description="Certification, one sub-command per thing certified: verifiers (the torch "
        "verifiers against the reference's exact laws), samplers vllm (vLLM's own rejection "
        "samplers), engine NAME (another engine's generate, black box), our-engine (our engine, white "
        "box), endpoint URL (a deployment through its own API).  The flags below are the one-command "
        "form, kept for one release (each prints a deprecation notice).",
    )
    _legacy_flags(p)
    p.set_defaults(func=run, check=check, certify_what=None)
    sub = p.add_subparsers(dest="certify_what", metavar="WHAT")
    _register_verifiers(sub)
    _register_samplers(sub)
    _register_engine(sub)
    _register_our_engine(sub)
    from spectr_gbv.cli import certify_endpoint

    certify_endpoint.register(sub)


def _sub(sub, name: str, help: str, description: str, **fixed):
    """A sub-command parser whose namespace also holds the legacy attributes it does not take."""
    q = sub.add_parser(name, help=help, description=description)
    q.set_defaults(**{**LEGACY_DEFAULTS, **fixed}, func=run, check=check)
    return q


def _register_verifiers(sub) -> None:
    from spectr_gbv.cli.args import add_json_flag, int_at_least, output_file, positive_int, seed_int, unit_interval_open

    q = _sub(sub, "verifiers", "the torch verifiers against the reference's exact laws",
             "Runs every registered torch verifier on fixed-draft and law-level cases, compares its outcomes "
             "with the reference's exact law (G-tests and the mean of tau), and checks that planted wrong "
             "rules are caught.  Exit 0 only when every lossless rule passes and every planted rule is caught.")
    q.add_argument("--rules", default=None, help="comma-separated registered rules (default: all)")
    q.add_argument("--quick", action="store_true", help="smaller N and fewer cases (every rule and planted "
                   "defect still covered; under 5 minutes on 2 CPU cores)")
    q.add_argument("--samples", type=int_at_least(2, " (the mean test needs 2 samples)"), default=None,
                   help=f"N for every case (default {FULL_N}; V = 4,096 rows {FULL_N_ROWS['rows']})")
    q.add_argument("--alpha", type=unit_interval_open, default=None, help=f"false-alarm rate per case "
                   f"(default {DEFAULT_ALPHA:g})")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed of the verifiers' noise")
    q.add_argument("--device", default="cpu", help="torch device of the verifiers (default cpu)")
    q.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    add_json_flag(q, "the rows")
    q.add_argument("--markdown", type=output_file, default=None, help="write the report as markdown to FILE")


def _register_samplers(sub) -> None:
    from spectr_gbv.cli.args import add_json_flag, output_file, positive_int, seed_int, unit_interval_open

    q = _sub(sub, "samplers", "a library's own rejection samplers (vllm) on the case families",
             "Certifies vLLM's installed rejection samplers (Model Runner V2 and v1) on the built-in case "
             "families against the rule each claims; runs in the vLLM environment of scripts/install.sh "
             "--vllm when vLLM is not importable here.")
    q.add_argument("third_party", metavar="LIBRARY", choices=["vllm"], help="vllm")
    q.add_argument("--samples", type=positive_int, default=None, help="N per case (default 2,000 on a CPU)")
    q.add_argument("--alpha", type=unit_interval_open, default=None, help="false-alarm rate per case")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed")
    q.add_argument("--families", default=None, help="comma-separated case families (default: all)")
    q.add_argument("--workers", type=positive_int, default=2, help="processes running cases (default 2)")
    add_json_flag(q, "the rows")
    q.add_argument("--markdown", type=output_file, default=None, help="write the report as markdown to FILE")


def _register_engine(sub) -> None:
    from spectr_gbv.cli.args import (add_json_flag, positive_int, positive_temperature_value, seed_int,
                                    unit_interval_open)

    q = _sub(sub, "engine", "another engine's generate with speculation on, black box (on the embedded tiny model)",
             "Samples N continuations of the engine's own generate on the embedded tiny SmolLM2 with "
             "speculation on and tests them against a reference copy of the target (omnibus randomized-PIT "
             "tests and directional tests); its lossless control must pass and its negative controls fail.  "
             f"Engines: {', '.join(GENERATE_ENGINES)} (vllm runs in the vLLM environment of "
             "scripts/install.sh --vllm).")
    q.add_argument("engine", metavar="NAME", choices=GENERATE_ENGINES, help=", ".join(GENERATE_ENGINES))
    q.add_argument("--modes", default=None, help="comma-separated substrings of the mode names (default all)")
    q.add_argument("--quick", action="store_true", help=f"N = {GENERATE_QUICK_SAMPLES} per mode")
    q.add_argument("--samples", type=positive_int, default=None, help="N per mode")
    q.add_argument("--alpha", type=unit_interval_open, default=None, help=f"per mode (default {ENGINE_ALPHA:g})")
    q.add_argument("--max-new-tokens", dest="max_new_tokens", type=positive_int, default=None,
                   help=f"tokens per sample (default {ENGINE_MAX_NEW_TOKENS})")
    q.add_argument("--temperature", type=positive_temperature_value, default=None, help="T of every mode (default 1)")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed")
    q.add_argument("--threads", type=positive_int, default=1, help="CPU threads of every model (default 1)")
    add_json_flag(q, "the rows")


def _register_our_engine(sub) -> None:
    from spectr_gbv.cli.args import (add_json_flag, int_at_least, positive_int, positive_temperature_value,
                                    seed_int, unit_interval_open)

    q = _sub(sub, "our-engine", "our speculative-decoding engine end to end, white box", _ENGINE_DESCRIPTION,
             engine=True)
    q.add_argument("--rules", default=None, help="comma-separated rules (default: every lossless rule but mdbv)")
    q.add_argument("--quick", action="store_true", help="the default rule, sd and gbv, N = 60")
    q.add_argument("--samples", type=int_at_least(2, " (the mean test needs 2 samples)"), default=None,
                   help="runs per rule")
    q.add_argument("--alpha", type=unit_interval_open, default=None, help=f"per rule (default {ENGINE_ALPHA:g})")
    q.add_argument("--max-new-tokens", dest="max_new_tokens", type=positive_int, default=None,
                   help=f"tokens per generation (default {ENGINE_MAX_NEW_TOKENS})")
    q.add_argument("--backend", choices=("torch", "llama.cpp"), default=None, help="torch (default) or llama.cpp")
    q.add_argument("--target", default=None, help="target model (default: the embedded 'tiny' SmolLM2, float32)")
    q.add_argument("--draft", default=None, help="draft model (default: the target itself, tempered)")
    q.add_argument("--draft-temperature", type=positive_temperature_value, default=None,
                   help=f"the draft's temperature (default {ENGINE_DRAFT_T:g} for the tempered copy)")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed")
    q.add_argument("--device", default="cpu", help="torch device (default cpu)")
    q.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    add_json_flag(q, "the rows")


_ENGINE_DESCRIPTION = ("Certifies our speculative-decoding engine on a real model: N seeded generations per rule "
                       "from one fixed prompt; the first emitted token G-tested against the target's exact law, "
                       "every iteration's tau against the reference rule's exact law of tau given the rows the "
                       "verifier got; planted wrong rules run through the engine must be caught.")


def _legacy_flags(p) -> None:
    from spectr_gbv.cli.args import (add_json_flag, int_at_least, output_file, positive_int, seed_int,
                                    positive_temperature_value, unit_interval_open)

    p.add_argument("--rules", default=None,
                   help="comma-separated registered rules (default: all); planted wrong rules run "
                   "with their base rule")
    p.add_argument("--quick", action="store_true",
                   help="smaller N and fewer cases (every rule and planted defect still covered; "
                   "under 5 minutes on 2 CPU cores)")
    p.add_argument("--samples", type=int_at_least(2, " (the mean test needs 2 samples)"), default=None,
                   help=f"N for every case (default {FULL_N}, V = 4,096 rows {FULL_N_ROWS['rows']} "
                   f"and {FULL_N_ROWS['rows_bf16']} in bfloat16; --quick: per kind, see the docs)")
    p.add_argument("--alpha", type=unit_interval_open, default=None,
                   help=f"false-alarm rate per case, in (0, 1) (default {DEFAULT_ALPHA:g}; "
                   f"--engine: {ENGINE_ALPHA:g} per rule)")
    p.add_argument("--seed", type=seed_int, default=0, help="base seed of the verifiers' noise (>= 0)")
    p.add_argument("--device", default="cpu", help="torch device of the verifiers (default cpu)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch intra-op threads (default 1: small batched ops are faster on one)")
    p.add_argument("--third-party", choices=["vllm"], default=None, dest="third_party",
                   help="certify vLLM's installed rejection samplers instead of ours (runs in the "
                   "vLLM environment of scripts/install.sh --vllm when vLLM is not importable here)")
    p.add_argument("--families", default=None,
                   help="--third-party: comma-separated case families (default: all; "
                   "toy, prefix, large, zeros, disjoint, equal)")
    p.add_argument("--workers", type=positive_int, default=2,
                   help="--third-party: processes running cases (default 2)")
    p.add_argument("--engine", nargs="?", const=True, default=False, metavar="NAME",
                   help="certify the speculative-decoding engine end to end on a real model "
                   "instead of the verifiers (first-token law and acceptance lengths; slow: "
                   "about 3 s per 16-token generation on 1 CPU thread; --quick ~13 minutes).  "
                   f"With NAME ({', '.join(GENERATE_ENGINES)}): certify what that engine's own "
                   "generate emits with speculation on, black box (gpu_backend/certify/generate.py), "
                   "its lossless control and its negative controls (vllm runs in the vLLM environment of "
                   "scripts/install.sh --vllm)")
    p.add_argument("--modes", default=None,
                   help="--engine NAME: comma-separated substrings of the mode names to run (default all)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help=f"--engine: tokens per generation (default {ENGINE_MAX_NEW_TOKENS})")
    p.add_argument("--backend", choices=("torch", "llama.cpp"), default=None,
                   help="--engine: run the models on transformers (torch, float32; default) or on "
                   "llama.cpp's kernels (the GGUF files as they are)")
    p.add_argument("--target", default=None,
                   help="--engine: target model (default: the embedded 'tiny' SmolLM2, float32)")
    p.add_argument("--draft", default=None,
                   help="--engine: draft model (default: the target itself, tempered)")
    p.add_argument("--draft-temperature", type=positive_temperature_value, default=None,
                   help=f"--engine: the draft's sampling temperature (default "
                   f"{ENGINE_DRAFT_T:g} for the tempered copy, 1 for a separate --draft)")
    p.add_argument("--engine-endpoint", default=None, dest="engine_endpoint", metavar="URL",
                   help="certify what an OpenAI-compatible server emits (POST URL/v1/completions with token "
                   "ids back, e.g. vLLM's server) serving the embedded tiny model, against transformers on "
                   "the same weights; a loopback URL unless --allow-remote")
    p.add_argument("--endpoint-model", default=None, dest="endpoint_model",
                   help="--engine-endpoint: the request's model field (default: the tiny model's folder)")
    p.add_argument("--allow-remote", action="store_true", dest="allow_remote",
                   help="--engine-endpoint: allow a non-loopback host")
    p.add_argument("--temperature", type=positive_temperature_value, default=None,
                   help="--engine NAME: the sampling temperature T of every mode, on the engine and the "
                   "reference alike (default 1)")
    add_json_flag(p, "the rows")
    p.add_argument("--markdown", type=output_file, default=None, help="write the report as markdown to FILE")


def deprecated_form(args: argparse.Namespace) -> str | None:
    """The sub-command a one-command invocation stands for (None for a sub-command)."""
    if getattr(args, "certify_what", None) is not None:
        return None
    if getattr(args, "engine_endpoint", None):
        return f"certify endpoint {args.engine_endpoint} --reference hf:tiny"
    if getattr(args, "third_party", None):
        return "certify samplers vllm"
    engine = getattr(args, "engine", False)
    if isinstance(engine, str):
        return f"certify engine {engine}"
    return "certify our-engine" if engine else "certify verifiers"


def check(args: argparse.Namespace) -> None:
    """The rule names against the registry, the engine-only flags and the device (ranges are
    checked by the parser)."""
    import os

    import torch

    os.environ["OMP_NUM_THREADS"] = str(getattr(args, "threads", 1) or 1)
    torch.set_num_threads(getattr(args, "threads", 1) or 1)

    from spectr_gbv.cli.args import UsageError, first_line

    from spectr_gbv.reference.rules import registry

    engine = getattr(args, "engine", False)
    if getattr(args, "engine_endpoint", None):
        if engine:
            raise UsageError("--engine-endpoint takes no --engine")
        from urllib.parse import urlparse

        from spectr_gbv.gpu_backend.certify.engines.openai_endpoint import LOOPBACK

        url = urlparse(args.engine_endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise UsageError(f"--engine-endpoint must be an http(s) URL, got {args.engine_endpoint!r}")
        if url.hostname not in LOOPBACK and not args.allow_remote:
            raise UsageError(f"--engine-endpoint: {url.hostname!r} is not a loopback address (--allow-remote)")
        args.engine = engine = "endpoint"
        return check_generate(args)
    if getattr(args, "endpoint_model", None) or getattr(args, "allow_remote", False):
        raise UsageError("--endpoint-model and --allow-remote need --engine-endpoint")
    if isinstance(engine, str):
        return check_generate(args)
    if getattr(args, "modes", None):
        raise UsageError("--modes needs --engine NAME")
    if getattr(args, "temperature", None) is not None:
        raise UsageError("--temperature needs --engine NAME")
    if getattr(args, "third_party", None):
        if engine or args.rules or args.quick:
            raise UsageError("--third-party takes neither --engine, --rules nor --quick")
        from spectr_gbv.gpu_backend.certify import vllm as vc

        args.alpha = vc.DEFAULT_ALPHA if args.alpha is None else args.alpha
        from spectr_gbv.oracle.certify_cases import FAMILIES

        args.family_list = None
        if args.families:
            args.family_list = tuple(f.strip() for f in args.families.split(",") if f.strip())
            bad = [f for f in args.family_list if f not in FAMILIES]
            if bad or not args.family_list:
                raise UsageError(f"--families: unknown family {bad[0] if bad else args.families!r} "
                                 f"(known: {', '.join(FAMILIES)})")
        if not vc.importable_here() and vc.locate_python() is None:
            raise UsageError("--third-party vllm: vLLM is not installed here and no vLLM environment was "
                             "found (make one with `scripts/install.sh --vllm`, or set SPECTR_GBV_VLLM_PYTHON)")
        return
    if getattr(args, "families", None):
        raise UsageError("--families needs --third-party")
    if not engine:
        given = [flag for flag, value in (("--max-new-tokens", getattr(args, "max_new_tokens", None)),
                                          ("--target", getattr(args, "target", None)),
                                          ("--draft", getattr(args, "draft", None)),
                                          ("--draft-temperature", getattr(args, "draft_temperature", None)),
                                          ("--backend", getattr(args, "backend", None)))
                 if value is not None]
        if given:
            raise UsageError(f"{given[0]} needs --engine")
    elif args.markdown:
        raise UsageError("--markdown is not available with --engine (use --json)")
    if getattr(args, "alpha", None) is None:
        args.alpha = ENGINE_ALPHA if engine else DEFAULT_ALPHA
    try:
        if engine:
            from spectr_gbv.gpu_backend.certify.engine import SKIPPED, engine_rules

            skipped = [r for r in (args.rules or "").split(",") if r.strip() in SKIPPED]
            if skipped:
                r = skipped[0].strip()
                raise UsageError(f"--engine: rule {r!r} is not certified on the engine: {SKIPPED[r]}")
            args.rule_list = parse_rules(args.rules, engine_rules())
        else:
            args.rule_list = parse_rules(args.rules, registry.names())
    except ValueError as err:
        raise UsageError(str(err)) from None
    if engine:
        from spectr_gbv.cli.models import check_models

        check_models(args.target or "tiny", args.draft)
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


def run(args: argparse.Namespace) -> int:
    """Dispatch to the part asked; a one-command invocation first prints its deprecation notice
    (after the checks: a bad invocation stays one line)."""
    import torch

    from spectr_gbv.cli.args import text_stream, write_json

    instead = deprecated_form(args)
    if instead is not None:
        print(f"spectr-gbv certify: the one-command form is deprecated (kept for one release); use "
              f"`spectr-gbv {instead}`", file=sys.stderr, flush=True)

    if getattr(args, "third_party", None):
        return run_third_party(args)
    if isinstance(getattr(args, "engine", False), str):
        return run_generate(args)
    if getattr(args, "rule_list", None) is None or args.alpha is None:  # check() not run
        check(args)
    rules, device = args.rule_list, args.torch_device
    torch.set_num_threads(args.threads)
    if getattr(args, "engine", False):
        return run_engine(args, rules, device)

    def progress(row):
        from spectr_gbv.gpu_backend.certify.verifiers import power_text

        extra = f"  {row.error}" if row.error else ""
        if row.power == row.power:  # a planted row: its effect and the power at its N
            extra += f"  effect TV {row.effect_tv:.4f}, power {power_text(row.power)} ({row.power_test})"
        print(f"certify: {row.verdict:6s} {row.case}  N={row.n}  p={row.pvalue:.3g}  "
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


def run_third_party(args: argparse.Namespace) -> int:
    """``certify --third-party vllm``: gpu_backend.certify.vllm here, or in the vLLM environment
    (re-running this command there); exit 0 only when every row is as expected."""
    from spectr_gbv.cli.args import text_stream, write_json

    from spectr_gbv.gpu_backend.certify import vllm as vc

    if not vc.importable_here():
        return vc.run_elsewhere(vc.locate_python(), sys.argv[1:])
    from spectr_gbv.gpu_backend.adapters import vllm_shims

    n = args.samples or (vc.CPU_N if vllm_shims.needs_interpreter() else vc.GPU_N)

    def progress(row):
        extra = f"  {row.detail}" if row.detail else ""
        print(f"certify --third-party vllm: {row.verdict:6s} {row.sampler} / {row.family}  N={row.n}  "
              f"{row.seconds:.0f}s{extra}", file=sys.stderr, flush=True)

    cert = vc.certify_vllm(n, args.alpha, args.seed, args.workers, families=args.family_list, progress=progress,
                           native_n=args.samples or vc.NATIVE_N)
    command = ("spectr-gbv certify --third-party vllm" + (f" --samples {args.samples}" if args.samples else "")
               + (f" --families {','.join(args.family_list)}" if args.family_list else ""))
    out = text_stream(args)
    print(vc.markdown(cert, command), file=out)
    write_json(args.json_file, {"version": cert.version, "device": cert.device,
                                "rows": [r.to_json() for r in cert.rows]})
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(vc.markdown(cert, command) + "\n")
    return 0 if cert.ok else 1


def run_engine(args: argparse.Namespace, rules: list[str], device) -> int:
    """``certify --engine``: gpu_backend.certify.engine on the chosen pair; prints the table
    and the summary; exit 0 only when every rule passes and every planted rule is caught."""
    from spectr_gbv.cli.args import UsageError, first_line, text_stream, write_json

    from spectr_gbv.gpu_backend.certify import engine as ec
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    if args.rules is None and args.quick:
        rules = list(ec.CI_RULES)
    n = args.samples or (ec.QUICK_ENGINE_SEEDS if args.quick else ec.DEFAULT_ENGINE_SEEDS)
    tokens = args.max_new_tokens or ec.DEFAULT_MAX_NEW_TOKENS
    target_name = args.target or "tiny"
    from spectr_gbv.gpu_backend.models.pair import ModelLoadError

    try:
        backend = args.backend or "torch"
        if backend == "llama.cpp" and device.type != "cpu":
            raise UsageError("--backend llama.cpp runs on the CPU (leave --device at cpu)")
        pair = ec.certification_pair(target_name, args.draft, "float32", device, backend)
    except ModelLoadError as err:  # the loader's OSError or ValueError is the cause
        raise UsageError(f"--engine: cannot load the models: {first_line(err.__cause__)}") from None
    except (OSError, ValueError) as err:  # draft and target that do not fit together
        raise UsageError(f"--engine: cannot load the models: {first_line(err)}") from None
    draft_t = args.draft_temperature or (ec.DEFAULT_DRAFT_TEMPERATURE if args.draft is None else 1.0)
    ids = encode_prompt(pair.tokenizer, ec.DEFAULT_PROMPT, chat=False)
    weights = "float32" if backend == "torch" else "GGUF on llama.cpp"
    setup = (f"target {target_name} ({weights}, T = 1), draft "
             f"{args.draft or target_name} (T = {draft_t:g}), prompt {ec.DEFAULT_PROMPT!r} "
             f"({len(ids)} tokens), {tokens} new tokens per run, device {device}")
    print(f"certify --engine: {setup}", file=sys.stderr, flush=True)

    def progress(row):
        extra = f"  {row.error}" if row.error else ""
        power = (f"  effect: mean τ shift {row.effect_shift:+.3f}, TV {row.effect_tv:.3f}; power {row.power:.6f}"
                 if row.power == row.power else "")
        print(f"certify --engine: {row.verdict:6s} {row.rule}  N={row.n}  iterations="
              f"{row.iterations}  {row.seconds:.0f}s{power}{extra}", file=sys.stderr, flush=True)

    def log(message):  # within a row: every 10 runs or 30 s (a row takes minutes)
        print(f"{time.strftime('%H:%M:%S')} certify --engine: {message}", file=sys.stderr, flush=True)

    cert = ec.certify_engine(pair.target, pair.draft, ids, rules, n_seeds=n, max_new_tokens=tokens,
                             alpha=args.alpha, sampling=SamplingConfig(1.0),
                             draft_sampling=SamplingConfig(draft_t), first_seed=args.seed,
                             eos_token_ids=pair.eos, setup=setup, progress=progress, log=log,
                             backend=pair.backend)
    out = text_stream(args)
    print(ec.text_table(cert.rows), file=out)
    print(file=out)
    print(ec.summary(cert), file=out)
    write_json(args.json_file, {"setup": setup, "rows": [r.to_json() for r in cert.rows]})
    return 0 if cert.ok else 1


def check_generate(args: argparse.Namespace) -> None:
    """``--engine NAME``: the engine name and the flags it takes."""
    from spectr_gbv.cli.args import UsageError

    if args.engine == "endpoint" and not getattr(args, "engine_endpoint", None):
        raise UsageError("--engine endpoint: give the server with --engine-endpoint URL")
    if args.engine not in GENERATE_ENGINES + ("endpoint",):
        raise UsageError(f"--engine: unknown engine {args.engine!r}; known: {', '.join(GENERATE_ENGINES)} "
                         "(or --engine alone: our engine's white-box certificate)")
    given = [flag for flag, value in (("--rules", args.rules), ("--third-party", args.third_party),
                                      ("--target", args.target), ("--draft", args.draft),
                                      ("--backend", args.backend), ("--markdown", args.markdown),
                                      ("--draft-temperature", args.draft_temperature),
                                      ("--families", args.families)) if value]
    if given:
        raise UsageError(f"{given[0]} is not available with --engine {args.engine}")
    if args.alpha is None:
        args.alpha = ENGINE_ALPHA


def run_generate(args: argparse.Namespace) -> int:
    """``certify --engine NAME``: every mode of the engine (gpu_backend.certify.engines.modes):
    the verdict table with stated power; exit 0 only when every lossless mode passes and every
    negative control is caught."""
    from spectr_gbv.cli.args import text_stream, write_json

    from spectr_gbv.gpu_backend.certify import generate as gc
    from spectr_gbv.gpu_backend.certify.engines import modes as gm

    if getattr(args, "alpha", None) is None:
        check_generate(args)
    n = args.samples or (GENERATE_QUICK_SAMPLES if args.quick else GENERATE_SAMPLES.get(args.engine, ENDPOINT_SAMPLES))
    mode_list = None
    if args.engine == "endpoint":
        mode_list = [gm.endpoint_mode(args.engine_endpoint, args.endpoint_model, args.allow_remote)]
    tokens = args.max_new_tokens or gm.DEFAULT_NEW_TOKENS
    names = [m.strip() for m in args.modes.split(",") if m.strip()] if args.modes else None
    T = args.temperature or gm.DEFAULT_TEMPERATURE
    print(f"certify --engine {args.engine}: the embedded tiny SmolLM2-135M-Instruct, T = "
          f"{T:g}, prompt {gm.DEFAULT_PROMPT!r}, N = {n} samples of {tokens} tokens "
          f"per mode, alpha = {args.alpha:g} per mode", file=sys.stderr, flush=True)

    def progress(res):
        print(f"{time.strftime('%H:%M:%S')} certify --engine: {res.verdict:5s} (expected {res.mode.expect}) "
              f"{res.mode.name}{'  ' + res.error if res.error else ''}", file=sys.stderr, flush=True)

    def log(message):
        print(f"{time.strftime('%H:%M:%S')} certify --engine: {message}", file=sys.stderr, flush=True)

    results = gm.run_modes(args.engine, n, tokens, args.alpha, args.seed, names, progress, log, temperature=T,
                           mode_list=mode_list, threads=args.threads)
    out = text_stream(args)
    certs = [r.cert for r in results if r.cert is not None]
    print(gc.text_table(certs), file=out)
    for r in results:
        if r.error:
            print(f"{r.mode.name}: {r.error}", file=out)
    print(file=out)
    print(gc.POWER_NOTE, file=out)
    bad = [r for r in results if not r.as_expected]
    print(f"{len(results) - len(bad)}/{len(results)} modes as expected (lossless PASS, negative controls FAIL)"
          + (f"; not as expected: {', '.join(r.mode.name for r in bad)}" if bad else ""), file=out)
    write_json(args.json_file, {"engine": args.engine, "temperature": T, "n_new": tokens, "rows": [gc.to_json(r.cert) | {"expect": r.mode.expect}
                                                                for r in results if r.cert is not None]})
    return 0 if not bad and results else 1


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
