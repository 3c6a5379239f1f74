"""``certify_endpoint``: certify any OpenAI-compatible (or SGLang, TGI, llama.cpp) server through
its own API — every check of the inputs before anything slow, then ``run.certify_deployment``.

Order of the checks (each failure is one ``DeploymentInputError`` line; the CLI exits 2):

1. the plan's numbers and the URL (any host; an API key only over https off this machine unless
   ``insecure``; ``/v1`` base URLs taken with a note);
2. the reference's form (``references.parse_reference``) and what it can do: a top-k reference
   (``self``, ``endpoint:``) gives log-probabilities before temperature (vLLM's prompt
   log-probabilities are the raw log-softmax), whose top k do not determine the law at T ≠ 1, so
   T ≠ 1 needs a whole-law reference (``hf:``, ``gguf:``) — unless ``--as-client`` declares the
   law, which is then computed from the top k (``certify.declared_laws``: exact, bounded or
   skipped); ``--reference reported`` and ``--as-client`` need the OpenAI dialect, and
   ``--audit-reference`` is ``self`` or ``endpoint:``;
3. the server answers (one short probe, within seconds, before any model loads): a refused API
   key (HTTP 401/403), an HTML page or HTTP 404 on every probe path are each named as such; then
   its model name (``--model`` or the server's first listed model);
4. the prompts (the shipped set or ``--prompts``), text tokenized by the server's ``/tokenize``
   (else by the local reference's tokenizer);
5. the run file (a new one, or ``--resume`` of one made with the same plan, whose looks did not
   FAIL and whose plan asks more samples than they tested: ``run.continuation_problem``);
6. only then a local reference's weights load; a reference other than ``self`` must agree with
   the server on the log-probabilities of the first prompt's own tokens (mean gap ≤
   ``AGREEMENT_NATS``): a reference of another model or vocabulary is refused in one line
   instead of failing the test.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from spectr_gbv.certify.endpoint.client import Endpoint, EndpointError, EndpointUnreachable
from spectr_gbv.certify.endpoint.prompts import DEFAULT_PROMPTS, load_prompts
from spectr_gbv.certify.endpoint.references import (GGUFReference, HFReference, ReportedReference,
                                                   ServerReference, parse_reference)
from spectr_gbv.certify.endpoint.run import Plan, ServerEngine, certify_deployment, continuation_problem, plan_dict
from spectr_gbv.certify.endpoint.servers import ProtocolError, dialect
from spectr_gbv.certify.endpoint.store import RunFile


# the largest mean gap (nats) between the server's and the reference's log-probabilities of the
# first prompt's tokens: a quantized or bfloat16 copy of the same model stays far below (0.05-0.2),
# another model or vocabulary far above
AGREEMENT_NATS = 1.0


class DeploymentInputError(ValueError):
    """A bad input or an unreachable server: one line, exit 2."""


def prompt_gap(ep, dia, model: str, reference, prompt) -> float | None:
    """Mean |server − reference| log-probability of the prompt's tokens 1..P−1 (nats), from the
    server's own prompt log-probabilities; None when the server gives none or the prompt has one
    token."""
    if len(prompt) < 2:
        return None
    try:
        answers = [ep.post(path, body) for path, body in dia.reference_requests(model, prompt[:1], prompt[1:], 1)]
        server = dia.parse_reference(answers, prompt[:1], prompt[1:], 1).token_logprobs
    except (EndpointError, ProtocolError):
        return None
    local = reference.rows(prompt[:1], prompt[1:]).raw
    gaps = [abs(a - b) for a, b in zip(server, local) if a is not None and b is not None]
    return sum(gaps) / len(gaps) if gaps else None


@dataclass
class EndpointRequest:
    """What ``certify endpoint`` was asked (the CLI's flags; see ``cli/certify_endpoint.py``).
    ``insecure``: send the API key over plain http off this machine; ``max_rps``: the most request
    starts per second per server; ``adaptive``: adapt the requests in flight (``pacing.Pacer``;
    False only for comparisons)."""

    url: str
    model: str | None = None
    server: str = "openai"
    reference: str = "self"
    prompts: str | None = None
    plan: Plan = field(default_factory=Plan)
    record: str | None = None
    resume: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    insecure: bool = False
    timeout_s: float = 120.0
    retries: int = 4
    max_rps: float | None = None
    adaptive: bool = True
    audit_reference: str | None = None


@dataclass
class Prepared:
    """Everything ``certify_deployment`` needs, checked (``prepare``)."""

    engine: object
    reference: object
    prompts: list
    plan: Plan
    run_file: RunFile
    server: str
    model: str
    reference_name: str
    vocab: int | None
    notes: list
    audit_reference: object = None


def _endpoint(url: str, req: EndpointRequest, flag: str) -> Endpoint:
    try:
        return Endpoint(url, api_key_env=req.api_key_env, timeout_s=req.timeout_s, retries=req.retries,
                        insecure=req.insecure, concurrency=req.plan.concurrency, adaptive=req.adaptive,
                        max_rps=req.max_rps)
    except ValueError as err:
        raise DeploymentInputError(f"{flag}: {err}") from None


def _probe(ep: Endpoint, dia, flag: str):
    """The first probe path's answer (None when the server answers none of them with JSON).

    Raises:
        DeploymentInputError: the server cannot be reached, refuses the API key, answers an HTML
            page, or answers HTTP 404 on every probe path (no such API at this URL).
    """
    for path in dia.probe_paths:
        try:
            answer = ep.probe(path)
        except EndpointError as err:  # EndpointUnreachable included
            raise DeploymentInputError(f"{flag}: {err}") from None
        if answer is not None:
            return answer
    if dia.probe_paths and all(ep.probe_status.get(p) == 404 for p in dia.probe_paths):
        paths = " and ".join(f"GET {p}" for p in dia.probe_paths)
        raise DeploymentInputError(f"{flag}: no {dia.name} API at {ep.root}: {paths} answered HTTP 404; is the URL "
                                   f"the server's root (e.g. http://HOST:8000), and --server {dia.name} its API?")
    return None


def default_record_path(root: str) -> str:
    host = root.split("://", 1)[-1].replace(":", "-").replace("/", "_")
    return f"spectr-gbv-certify-{host}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"


def prepare(req: EndpointRequest, log=None) -> Prepared:
    """Check everything in the module doc's order and build the run.

    Raises:
        DeploymentInputError: the first problem found, one line naming the flag.
    """
    say = log or (lambda line: None)
    try:
        req.plan.check()
    except ValueError as err:
        raise DeploymentInputError(str(err)) from None
    try:
        dia = dialect(req.server)
    except ValueError as err:
        raise DeploymentInputError(f"--server: {err}") from None
    try:
        ref_kind, ref_arg = parse_reference(req.reference)
    except ValueError as err:
        raise DeploymentInputError(str(err)) from None
    plan = req.plan
    declared_law = plan.temperature != 1.0 or plan.top_p < 1 or plan.sampling_top_k > 0 or plan.min_p > 0
    if ref_kind in ("self", "endpoint") and declared_law and not plan.as_client:
        raise DeploymentInputError(
            f"--temperature {plan.temperature:g} needs a whole-law reference (--reference hf:… or gguf:…): a "
            "server's prompt log-probabilities are before temperature and its top k do not give the law at T ≠ 1 "
            "(--as-client tests a declared law from them, exactly where the truncation lies inside the top k and "
            "within stated bounds otherwise)")
    if (ref_kind == "reported" or plan.as_client) and req.server != "openai":
        raise DeploymentInputError(f"--server {req.server}: --reference reported and --as-client speak the OpenAI "
                                   "completions API only (--server openai)")
    if ref_kind == "reported" and plan.k < 1:
        raise DeploymentInputError("--top-k: --reference reported needs k >= 1 alternatives per position")
    if req.audit_reference is not None and ref_kind != "reported":
        raise DeploymentInputError("--audit-reference: the audit is part of --reference reported only")
    audit_kind, audit_arg = "self", ""
    if req.audit_reference is not None:
        try:
            audit_kind, audit_arg = parse_reference(req.audit_reference)
        except ValueError as err:
            raise DeploymentInputError(str(err).replace("--reference", "--audit-reference")) from None
        if audit_kind not in ("self", "endpoint"):
            raise DeploymentInputError(f"--audit-reference {req.audit_reference}: the audit re-scores by a server's "
                                       "prefill: self or endpoint:URL")
    ep = _endpoint(req.url, req, "URL")
    notes = list(ep.notes)
    if req.api_key_env != EndpointRequest.api_key_env and not os.environ.get(req.api_key_env):
        notes.append(f"--api-key-env {req.api_key_env}: that variable is not set here; no API key was sent")
    answer = _probe(ep, dia, "URL")
    model = req.model or dia.model_name(answer)
    if not model and req.server == "openai":
        raise DeploymentInputError("--model: the server lists no model at /v1/models; give --model NAME")
    model = model or "model"
    ref_ep = None
    if ref_kind == "endpoint":
        ref_ep = _endpoint(ref_arg, req, "--reference endpoint:")
        ref_answer = _probe(ref_ep, dia, "--reference endpoint:")
        ref_model = dia.model_name(ref_answer) or model
    prompts_raw = list(DEFAULT_PROMPTS) if req.prompts is None else None
    if prompts_raw is None:
        try:
            prompts_raw = load_prompts(req.prompts)
        except ValueError as err:
            raise DeploymentInputError(str(err)) from None
    local = None

    def load_local():
        nonlocal local
        if local is None and ref_kind in ("hf", "gguf"):
            say(f"loading the reference {req.reference} …")
            try:
                local = (HFReference(ref_arg, req.plan.temperature) if ref_kind == "hf"
                         else GGUFReference(ref_arg, req.plan.temperature))
            except ModuleNotFoundError as err:  # the light install: no torch, transformers, llama_cpp
                extra = "llamacpp" if (err.name or "").startswith("llama_cpp") else "torch"
                raise DeploymentInputError(f"--reference {req.reference} needs {err.name}, which is not installed "
                                           f"here: pip install 'spectr-gbv[{extra}]' (or use --reference self)") from None
            except (OSError, ValueError, RuntimeError, ImportError) as err:
                raise DeploymentInputError(f"--reference {req.reference}: cannot load it: "
                                           f"{' '.join(str(err).split())[:300]}") from None
        return local

    if hasattr(dia, "prompt_texts") and any(isinstance(p, list) for p in prompts_raw):
        raise DeploymentInputError(f"--prompts: --server {req.server} takes text prompts; the file gives token ids")
    prompts = []
    for n, p in enumerate(prompts_raw):
        if isinstance(p, list):
            prompts.append(p)
            continue
        try:
            path, body = dia.tokenize_request(model, p)
            ids = dia.parse_tokens(ep.post(path, body))
        except (EndpointError, ProtocolError) as err:
            ref = load_local()
            if ref is None:
                raise DeploymentInputError(f"--prompts: prompt {n} is text and the server did not tokenize it "
                                           f"({err}); give token ids, or a local reference (hf:, gguf:)") from None
            ids = ref.tokenize(p)
        if hasattr(dia, "prompt_texts"):
            dia.prompt_texts[tuple(ids)] = p
        prompts.append(ids)
    declared = plan.declared() if declared_law else None
    audit_ref = None
    if ref_kind == "reported":
        reference, vocab = ReportedReference(plan.k, declared), None
        if plan.audit > 0:
            if audit_kind == "endpoint":
                aep = _endpoint(audit_arg, req, "--audit-reference endpoint:")
                amodel = dia.model_name(_probe(aep, dia, "--audit-reference endpoint:")) or model
                audit_ref = ServerReference(aep, dia, amodel, plan.k, declared)
            else:
                audit_ref = ServerReference(ep, dia, model, plan.k, declared)
            notes.append(f"--reference reported: the samples are tested against the laws their own answers report; "
                         f"an audit re-scores {plan.audit:.0%} of them (at least {plan.audit_min}) by prefill against "
                         f"{req.audit_reference or 'self'}")
        else:
            notes.append("--reference reported with --audit 0: no audit; a server that reports the law it wrongly "
                         "samples from passes (docs/guarantees.md)")
    elif ref_kind == "self":
        reference, vocab = ServerReference(ep, dia, model, req.plan.k, declared), None
    elif ref_kind == "endpoint":
        reference, vocab = ServerReference(ref_ep, dia, ref_model, req.plan.k, declared), None
    else:
        reference = load_local()
        reference.declared = declared
        vocab = reference.vocab
        beyond = [t for p in prompts for t in p if t >= vocab]
        if beyond:
            raise DeploymentInputError(f"--reference {req.reference}: the server's prompt holds token id {beyond[0]}, "
                                       f"outside the reference's vocabulary of {vocab:,}: not the same vocabulary")
    if plan.as_client:
        notes.append("--as-client: requests as the client sends them (" + (
            "the fields of --request-template" if plan.template else "no sampling field") + "), tested against the "
            f"declared law T {plan.temperature:g}, top-p {plan.top_p:g}, top-k {plan.sampling_top_k or 'none'}, "
            f"min-p {plan.min_p:g}")
    if ref_kind not in ("self", "reported"):
        gap = prompt_gap(ep, dia, model, reference, prompts[0])
        if gap is None:
            notes.append("the reference's agreement with the server was not checked (no prompt log-probabilities)")
        elif gap > AGREEMENT_NATS:
            raise DeploymentInputError(
                f"--reference {req.reference} disagrees with the server on the first prompt's own tokens (mean "
                f"log-probability gap {gap:.2f} nats > {AGREEMENT_NATS:g}): not the same model or vocabulary")
        else:
            notes.append(f"the reference agrees with the server on the first prompt's tokens (mean log-probability "
                         f"gap {gap:.2g} nats)")
    root = ep.root
    plan_header = plan_dict(req.plan, model=model, prompts=prompts, reference=req.reference, server=req.server,
                            url=root)
    path = req.resume or req.record or default_record_path(root)
    try:
        run_file = RunFile(path, plan_header, resume=bool(req.resume))
    except (ValueError, OSError) as err:
        raise DeploymentInputError(str(err)) from None
    problem = continuation_problem(run_file, req.plan)
    if problem:
        run_file.close()
        raise DeploymentInputError(problem)
    notes.append(f"samples are appended to {Path(path)}; `--resume {Path(path)}` continues this run")
    return Prepared(ServerEngine(ep, dia, model, req.plan.temperature, req.plan), reference, prompts, req.plan,
                    run_file, root, model, req.reference, vocab, notes, audit_ref)


def power_endpoint(req: EndpointRequest, pilot: int = 16, progress=None, log=None) -> str:
    """``--power``: run the plan's first ``pilot`` samples (kept in the run file: ``--resume``
    continues the run from them) and return what the whole plan detects (``report.power_report``).

    Raises:
        DeploymentInputError: as ``prepare``; a pilot that yields no sample.
    """
    from dataclasses import replace

    from spectr_gbv.certify.endpoint.report import power_report
    from spectr_gbv.oracle.sequence_family import plan_power

    prep = prepare(req, log)
    small = replace(prep.plan, n_samples=min(pilot, prep.plan.n_samples), replays=0, sequential=False)
    bar = progress(small.n_samples) if progress is not None else None
    try:
        cert = certify_deployment(prep.engine, prep.reference, prep.prompts, small, prep.run_file,
                                  server=prep.server, model=prep.model, reference_name=prep.reference_name,
                                  vocab=prep.vocab, progress=bar, log=log, shown=False)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()
    records = [r for sample in cert.records for r in sample]
    if cert.samples == 0 or not records:
        raise DeploymentInputError("--power: the pilot gave no sample (" + "; ".join(cert.first_errors[:1] or
                                                                              cert.notes[:1] or ["?"]) + ")")
    pp = plan_power(records, prep.plan.planned_samples * prep.plan.n_new, prep.plan.alpha, prep.plan.tolerance,
                    n_positions=prep.plan.n_new)
    extra = ""
    if prep.plan.sequential:
        from spectr_gbv.certify.endpoint.sequential import TARGETS, samples_needed

        need = samples_needed(records, len(records) / max(1, cert.samples), prep.plan.alpha, prep.plan.tolerance,
                              prep.plan.looks())
        targets = (f"temperature |Δβ| <= {TARGETS['temperature']:g}, a truncation of {TARGETS['truncation']:.0%} of the "
                   f"mass (top-p 0.99) and an omnibus TV of {TARGETS['omnibus']:g}")
        extra = (f"\nthe sequential plan (looks at {', '.join(map(str, prep.plan.looks()))} samples): "
                 + (f"{targets} resolved at about {need} samples" if need is not None else
                    f"{targets} not all resolved within 4 million samples (a top-k reference whose lists do not reach "
                    "the top-p 0.99 nucleus never resolves that level)")
                 + (f" (beyond --max-samples {prep.plan.max_samples})" if need and need > prep.plan.max_samples else ""))
    return power_report(pp, prep.plan, cert.samples, cert.samples_per_second) + extra + "\n" + "\n".join(
        f"note: {n}" for n in prep.notes)


def certify_endpoint(req: EndpointRequest, progress=None, log=None):
    """``prepare`` then ``run.certify_deployment``; returns its ``DeploymentCertificate`` with the
    preparation's notes first.

    Args:
        req: the ``EndpointRequest``.
        progress: optional ``progress(total) -> bar`` (an object with ``update(n)``), called once the
            checks have passed (a tqdm factory); log: optional line callback.
    Raises:
        DeploymentInputError: as ``prepare``.
    """
    prep = prepare(req, log)
    bar = progress(prep.plan.looks()[0]) if progress is not None else None
    try:
        cert = certify_deployment(prep.engine, prep.reference, prep.prompts, prep.plan, prep.run_file,
                                  server=prep.server, model=prep.model, reference_name=prep.reference_name,
                                  vocab=prep.vocab, progress=bar, log=log, audit_reference=prep.audit_reference)
    finally:
        if bar is not None and hasattr(bar, "close"):
            bar.close()
    cert.notes[:0] = prep.notes
    cert.notes.extend(pacing_notes(prep.engine.endpoint, req))
    return cert


def pacing_notes(ep: Endpoint, req: EndpointRequest) -> list[str]:
    """Lines for the report about how the server coped with the load (``pacing.Pacer``): requests
    that timed out, overload answers, the lowest concurrency reached, and what to change."""
    st, lines = ep.pacer.stats, []
    if st.timeouts:
        lines.append(f"{st.timeouts} request(s) timed out after {req.timeout_s:g} s (the server may still have "
                     f"computed them); the run lowered its requests in flight from {ep.pacer.ceiling} to {st.lowest}. "
                     f"If this server is this slow under load, give it --timeout {2 * req.timeout_s:g} or "
                     f"--concurrency {max(1, st.lowest)}")
    if st.overloads:
        lines.append(f"the server answered {st.overloads} request(s) with HTTP 429/503/504 (overloaded); the run lowered "
                     f"its requests in flight to {st.lowest}" + (f" and waited {st.paused_s:.0f} s as Retry-After "
                                                                 "asked" if st.paused_s >= 1 else "")
                     + f"; --concurrency {max(1, st.lowest)} or --max-rps lowers the load from the start")
    return lines
