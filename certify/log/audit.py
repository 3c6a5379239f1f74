"""``--audit URL``: re-score a subsample of a log by prefill against a running server.

A log's certificate takes each answer's reported top-k lists as the reference, so a server that
reports the law it wrongly samples from (log-probabilities after its own wrong temperature, a
draft's tokens reported from the draft) is self-consistent there and passes.  The audit re-asks
the target's law of a subsample of the logged samples from the server's own prefill (the prompt
and the sampled tokens sent back with ``echo``: ``certify.endpoint.references.ServerReference``,
which speculation never touches), and

- tests those samples against the prefill's lists, transformed by each request's own sampling
  fields exactly as the log's (``cells.request_law``): the family (``tally.Tally``) at the audit's
  own α;
- compares each sampled token's reported log-probability with the prefill's: the sign test of
  ``oracle.sequence_reports.logprob_shift_test`` (τ = 0.1 nats) and the 1-nat bound of
  ``certify endpoint``.

A line is audited when a hash of (seed, line) falls below ``fraction`` (the same lines in any
shard), up to ``max_samples`` samples; requests whose prompt is neither token ids nor text are
skipped (text is tokenized by the server's ``/tokenize``).  Misreporting on a fraction f of the
samples is unseen by m audited samples with probability at most (1 − f)^m (stated in the report).
The audit's α is its own: a certificate with an audit fails with probability at most
α (log) + α (audit) under the null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from spectr_gbv.certify.log.parse import Sample, parse_line
from spectr_gbv.certify.log.tally import Tally, uniforms

AUDIT_STREAM = 0x41554449  # the audit's line selection: a stream no PIT shares
LOGPROB_BOUND = 1.0  # nats: one reported log-probability this far from the prefill's fails (certify endpoint's)


def audited(seed: int, line, fraction: float) -> np.ndarray:
    """Whether each line is in the audit's subsample (a hash of (seed, line) below ``fraction``)."""
    return uniforms(int(seed) ^ AUDIT_STREAM, line, 0, 0) < fraction


@dataclass
class AuditResult:
    """The audit of a log (module doc).

    Attributes:
        url: the server; fraction: the lines' share asked; samples: samples re-scored;
        tally: their sums against the prefill (``tally.Tally``); family, reports: its tests;
        shift: the reported-minus-prefill sign test (``DirectionalResult`` or None); gaps: (n,
        largest |gap|, count over ``LOGPROB_BOUND``); errors: requests that failed, first_errors:
        their first lines; skipped: samples not audited (no prompt ids or text).
    """

    url: str
    fraction: float
    samples: int = 0
    tally: Tally | None = None
    family: object = None
    reports: tuple = ()
    shift: object = None
    gaps: tuple = (0, 0.0, 0)
    errors: int = 0
    first_errors: list = field(default_factory=list)
    skipped: int = 0

    @property
    def incomplete(self) -> bool:
        """Lines were selected but no sample could be re-scored (requests failed)."""
        return self.samples == 0 and self.errors > 0

    @property
    def failed(self) -> bool:
        return ((self.family is not None and not self.family.passed) or any(not r.passed for r in self.reports)
                or (self.shift is not None and not self.shift.passed) or self.gaps[2] > 0)


def _prompt_ids(req: dict, ep, dia, model: str):
    p = req.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (list, str)):
        p = p[0]  # a batch of one
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return [int(t) for t in p]
    if isinstance(p, str) and p:
        path, body = dia.tokenize_request(model, p)
        return dia.parse_tokens(ep.post(path, body))
    return None


def audit_log(path: str, tally_plan, url: str, *, fraction: float = 0.1, max_samples: int = 64,
              model: str | None = None, start: int = 0, stop: int | None = None, first_line: int = 0,
              endpoint=None, look: int = 1) -> AuditResult:
    """Audit the lines [start, stop) of the log at ``path`` against the server at ``url``.

    Args:
        path: the log; tally_plan: the run's ``run.LogPlan`` (α, η, seed, vocab, max_bound).
        url: the server (an OpenAI-compatible completions API that returns prompt log-probs with
            ``echo``); fraction: the lines' share audited, in (0, 1]; max_samples: at most this many
            samples; model: the requests' model field (default: each logged request's own).
        start, stop, first_line: as ``run.certify_log``'s.
        endpoint: a ``client.Endpoint`` to use (default: one for ``url``).
        look: the certificate's look (``oracle.look_spending``): the audit's KS rows and report
            tests take its share α_j, its e-values their whole share.
    Returns:
        ``AuditResult``.
    Raises:
        ValueError: fraction or max_samples out of range, a bad URL.
        EndpointError: the server cannot be reached (``client.EndpointUnreachable``), refuses the key.
    """
    from spectr_gbv.certify.endpoint.client import Endpoint, EndpointError
    from spectr_gbv.certify.endpoint.references import ServerReference
    from spectr_gbv.certify.endpoint.servers import ProtocolError, dialect
    from spectr_gbv.certify.log.run import chunk_records
    from spectr_gbv.oracle.sequence_reports import DEFAULT_SHIFT, logprob_shift_test

    if not 0 < fraction <= 1:
        raise ValueError(f"--audit-fraction must be in (0, 1], got {fraction!r}")
    if max_samples < 1:
        raise ValueError(f"--audit-samples must be >= 1, got {max_samples!r}")
    ep = endpoint or Endpoint(url, timeout_s=120.0, retries=2)
    ep.probe("/v1/models")  # EndpointUnreachable at once when nothing answers there
    dia = dialect("openai")
    res = AuditResult(url, fraction)
    rescored, gaps = [], []
    with open(path, "rb") as f:
        for no, text in enumerate(f):
            if no < start:
                continue
            if (stop is not None and no >= stop) or len(rescored) >= max_samples:
                break
            line = first_line + no
            if not audited(tally_plan.seed, np.array([line]), fraction)[0]:
                continue
            samples, _ = parse_line(text, line)
            if not samples:
                continue
            req = json.loads(text)["request"]
            name = model or str(req.get("model") or "")
            try:
                prompt = _prompt_ids(req, ep, dia, name)
            except (EndpointError, ProtocolError) as err:
                prompt = None
                res.errors += 1
                if len(res.first_errors) < 3:
                    res.first_errors.append(f"line {line}: tokenize: {err}")
            for s in samples:
                if prompt is None or s.text or len(rescored) >= max_samples:
                    res.skipped += 1
                    continue
                try:
                    rows = ServerReference(ep, dia, name, s.k).rows(prompt, s.x.tolist())
                except (EndpointError, ProtocolError) as err:
                    res.errors += 1
                    if len(res.first_errors) < 3:
                        res.first_errors.append(f"line {line}: prefill: {err}")
                    continue
                top = rows.top
                ids = np.array([i for lst in top.top_ids for i in lst], dtype=np.int64)
                lps = [v for lst in top.top_logprobs for v in lst]
                lens = [len(lst) for lst in top.top_ids]
                rescored.append(Sample(s.line, s.choice, s.x, list(top.token_logprobs), ids, lps, lens, s.k, s.beta,
                                       s.top_k, s.top_p, s.min_p))
                for rep, ref in zip(s.lpx, top.token_logprobs):
                    if ref is not None and np.isfinite(rep) and np.isfinite(ref):
                        gaps.append(float(rep) - float(ref))
    t = Tally(tally_plan.alpha, tally_plan.tolerance, tally_plan.seed)
    got = chunk_records(rescored, t, tally_plan.vocab, tally_plan.max_bound)
    if got is not None:
        ra, line_a, choice, pos, sample_of, kept = got
        t.add(ra, line_a, choice, pos, sample_of, len(kept))
    t.counts["lines"] = len({s.line for s in rescored})
    res.samples, res.tally = len(rescored), t
    if t.counts["records"]:
        extra = int(bool(gaps))  # the shift test shares the report tests' α/16 with the other-cell test
        res.family = t.family(extra, look)
        res.reports = t.reports(extra, look)
        if gaps:
            res.shift = logprob_shift_test(gaps, t.report_alpha(extra, look), DEFAULT_SHIFT)
    big = [abs(g) for g in gaps]
    res.gaps = (len(gaps), max(big, default=0.0), sum(g > LOGPROB_BOUND for g in big))
    return res
