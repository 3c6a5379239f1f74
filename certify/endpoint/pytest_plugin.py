"""pytest plugin: certify a deployment from your own tests (the fixture ``spectr_endpoint``).

Installed with the package (entry point ``pytest11: spectr_gbv_endpoint``; the light install is
enough: no torch), so in any test file:

    def test_my_server(spectr_endpoint):
        spectr_endpoint("http://127.0.0.1:8000")       # the test fails unless the verdict is PASS

as ``spectr-gbv certify endpoint URL`` does it (``certify.endpoint.endpoint.certify_endpoint``,
imported when the fixture is first called: loading this plugin imports pytest and the standard
library only).  ``--spectr-endpoint-samples N``, ``--spectr-endpoint-tokens n`` and
``--spectr-endpoint-alpha A`` change its plan's defaults for the run (else
``certify.endpoint.run.Plan``'s, the same as the CLI's); a value given in the call wins
(docs/howto/certify_a_deployment_in_ci.md).  The verifier helpers (``spectr_certify``,
``spectr_contract``) are ``oracle.pytest_plugin``'s.
"""

from __future__ import annotations

import os

import pytest

# the run's plan defaults (None: Plan's), set by pytest_configure; a nested session (pytester)
# saves and restores the outer one's
_defaults: dict = {"samples": None, "tokens": None, "alpha": None}
_saved: list[dict] = []

# the lines of the text report (certify.endpoint.report.text_report) a failure message quotes
REPORT_LINES = 30


class SpectrEndpoint:
    """What the ``spectr_endpoint`` fixture returns: call it with a URL to certify that deployment.

    Attributes:
        samples: N samples (``--spectr-endpoint-samples``; None: ``Plan``'s default).
        max_new_tokens: tokens per sample (``--spectr-endpoint-tokens``; None: ``Plan``'s).
        alpha: the test family's false-alarm rate (``--spectr-endpoint-alpha``; None: ``Plan``'s).
        folder: where the run files go (the test's ``tmp_path``).
        runs: ``[(record path, certificate)]`` of the calls so far in this test.
    """

    def __init__(self, folder, samples: int | None = None, max_new_tokens: int | None = None,
                 alpha: float | None = None):
        self.folder, self.samples, self.max_new_tokens, self.alpha = folder, samples, max_new_tokens, alpha
        self.runs: list = []

    def __call__(self, url: str, *, reference: str = "self", samples: int | None = None,
                 max_new_tokens: int | None = None, alpha: float | None = None, model: str | None = None,
                 server: str = "openai", prompts: str | os.PathLike | None = None, **plan_fields):
        """Certify the deployment at ``url`` (``certify.endpoint.endpoint.certify_endpoint``) and
        return its certificate; fail the test unless the verdict is PASS.

        Args:
            url: the server's root, e.g. "http://127.0.0.1:8000" (a base URL ending in /v1 is
                taken with a note).
            reference: "self" (the server's own prompt log-probabilities; default),
                "endpoint:URL", "hf:NAME_OR_PATH" or "gguf:PATH" (``--reference``).
            samples: N samples (default ``--spectr-endpoint-samples``, else ``Plan.n_samples``).
            max_new_tokens: tokens per sample (default ``--spectr-endpoint-tokens``, else
                ``Plan.n_new``).
            alpha: the family's false-alarm rate (default ``--spectr-endpoint-alpha``, else
                ``Plan.alpha``).
            model: the requests' model field (default: the server's first listed model).
            server: "openai" (vLLM and OpenAI-compatible completions), "sglang", "tgi" or "llama.cpp".
            prompts: a JSONL prompts file (default: the shipped set).
            **plan_fields: any other ``certify.endpoint.run.Plan`` field (temperature, k,
                tolerance, auto_tolerance, logprob_tolerance, seed, concurrency, replays,
                max_errors) or ``EndpointRequest`` option (api_key_env, timeout_s, retries, …).
        Returns:
            certify.endpoint.run.DeploymentCertificate with verdict PASS (``text_report`` from
            ``certify.endpoint.report`` prints it; its run file is ``self.runs[-1][0]``, the
            certificate's JSON beside it).  A PASS's report is printed (pytest shows it with
            ``-rP``).
        Raises:
            pytest.fail.Exception (the test fails): the verdict is FAIL, INCOMPLETE or REFUSED;
                the message names the deciding tests (``report.deciding_lines``), then the report's
                first lines and the run file.  Also a bad plan value, an unreachable server or a
                refused reference (``DeploymentInputError``: one line, as the CLI's exit 2).
            TypeError: a keyword that is neither a ``Plan`` field nor an ``EndpointRequest`` option,
                or ``n_samples``/``n_new`` given besides ``samples``/``max_new_tokens``.
        """
        __tracebackhide__ = True
        import json
        from dataclasses import fields

        from spectr_gbv.certify.endpoint.endpoint import DeploymentInputError, EndpointRequest, certify_endpoint
        from spectr_gbv.certify.endpoint.report import certificate_json, deciding_lines, text_report
        from spectr_gbv.certify.endpoint.run import Plan

        plan_names = {f.name for f in fields(Plan)}
        fixed = {"url", "model", "server", "reference", "prompts", "plan", "record", "resume"}
        request_names = {f.name for f in fields(EndpointRequest)} - fixed
        plan_kw = {k: v for k, v in plan_fields.items() if k in plan_names}
        request_kw = {k: v for k, v in plan_fields.items() if k in request_names and k not in plan_names}
        unknown = sorted(set(plan_fields) - set(plan_kw) - set(request_kw))
        if unknown:
            raise TypeError(f"spectr_endpoint: unknown keyword(s) {unknown}; a Plan field is one of "
                            f"{sorted(plan_names)}, a request option one of {sorted(request_names)}")
        for name, alias, value in (("n_samples", "samples", samples), ("n_new", "max_new_tokens", max_new_tokens)):
            if name in plan_kw and value is not None:
                raise TypeError(f"spectr_endpoint: give {alias}= or {name}=, not both")
        for name, value in (("n_samples", samples if samples is not None else self.samples),
                            ("n_new", max_new_tokens if max_new_tokens is not None else self.max_new_tokens),
                            ("alpha", alpha if alpha is not None else self.alpha)):
            if value is not None:
                plan_kw.setdefault(name, value)
        stem = os.path.join(str(self.folder), f"spectr-endpoint-{len(self.runs)}")
        record = stem + ".jsonl"
        refused = None
        try:
            req = EndpointRequest(url=url, model=model, server=server, reference=reference,
                                  prompts=None if prompts is None else os.fspath(prompts), plan=Plan(**plan_kw),
                                  record=record, **request_kw)
            cert = certify_endpoint(req)
        except DeploymentInputError as err:
            refused = str(err)
        if refused is not None:  # failed outside the except block: no chained traceback
            pytest.fail(f"spectr_endpoint({url!r}): cannot certify: {refused}")
        self.runs.append((record, cert))
        report = text_report(cert)
        with open(stem + ".json", "w") as fh:
            json.dump(certificate_json(cert), fh, indent=1)
        lines = report.splitlines()
        more = len(lines) - REPORT_LINES
        if cert.verdict == "PASS" or more > 0:
            print(report)  # a failure's message holds the report unless it is longer
        if cert.verdict != "PASS":
            pytest.fail("\n".join(
                [f"deployment {url} ({cert.model or '-'}, reference {cert.reference}): verdict {cert.verdict}"]
                + [f"  {line}" for line in deciding_lines(cert)] + ["", "report:"] + lines[:REPORT_LINES]
                + ([f"... {more} more lines (in the captured stdout)"] if more > 0 else [])
                + [f"run file: {record} (certificate: {stem}.json)"]))
        return cert


@pytest.fixture
def spectr_endpoint(request, tmp_path) -> SpectrEndpoint:
    """Certify a deployment through its own API: ``spectr_endpoint(url, *, reference="self",
    samples=None, max_new_tokens=None, alpha=None, model=None, server="openai", prompts=None,
    **plan_fields)`` returns the ``DeploymentCertificate`` and fails the test unless its verdict is
    PASS (``SpectrEndpoint.__call__``).  Plan defaults from ``--spectr-endpoint-samples``,
    ``--spectr-endpoint-tokens``, ``--spectr-endpoint-alpha``; run files under ``tmp_path``."""
    return SpectrEndpoint(tmp_path, _defaults["samples"], _defaults["tokens"], _defaults["alpha"])


def pytest_addoption(parser):
    group = parser.getgroup("spectr-gbv-endpoint", "spectr-gbv deployment certification (spectr_endpoint)")
    group.addoption("--spectr-endpoint-samples", type=int, default=None, metavar="N",
                    help="samples of a deployment certification (spectr_endpoint; default: "
                    "spectr-gbv certify endpoint's --samples)")
    group.addoption("--spectr-endpoint-tokens", type=int, default=None, metavar="n",
                    help="tokens per sample of a deployment certification (spectr_endpoint; default: "
                    "certify endpoint's --max-new-tokens)")
    group.addoption("--spectr-endpoint-alpha", type=float, default=None, metavar="A",
                    help="false-alarm rate of a deployment certification's test family, in (0, 1) "
                    "(spectr_endpoint; default: certify endpoint's --alpha)")


def pytest_configure(config):
    en = config.getoption("spectr_endpoint_samples", None)
    et = config.getoption("spectr_endpoint_tokens", None)
    ea = config.getoption("spectr_endpoint_alpha", None)
    if en is not None and en < 1:
        raise pytest.UsageError(f"--spectr-endpoint-samples must be >= 1, got {en}")
    if et is not None and et < 1:
        raise pytest.UsageError(f"--spectr-endpoint-tokens must be >= 1, got {et}")
    if ea is not None and not 0.0 < ea < 1.0:
        raise pytest.UsageError(f"--spectr-endpoint-alpha must be in (0, 1), got {ea}")
    _saved.append(dict(_defaults))
    _defaults.update(samples=en, tokens=et, alpha=ea)


def pytest_unconfigure(config):
    if _saved:
        _defaults.update(_saved.pop())


def pytest_report_header(config):
    given = [f"{what} {_defaults[key]:g}" for what, key in (("N =", "samples"), ("tokens", "tokens"),
                                                             ("α =", "alpha")) if _defaults[key] is not None]
    if given:
        return [f"spectr-gbv deployment certification (spectr_endpoint): {', '.join(given)}"]
    return None
