"""``certify_generate``: certify what an engine's ``generate`` emits, from outside.

The engine is a callable ``sample(prompt_ids, n_new, seed) -> list[int]`` (the new token ids;
fewer on an early stop), run with speculation on; the reference is a callable
``laws(prompt_ids, tokens) -> float64 [len(tokens), V]`` giving the target's processed law
(temperature, top-k, top-p as the engine applies them) before each token, along the sampled
prefix — one teacher-forced forward of prompt + tokens on a reference copy of the target
(transformers on the same weights, or the same engine with speculation off).  The samples are
reduced to per-token records (``oracle.sequence_records``) and tested by the family of
``oracle.sequence_family``: the omnibus randomized-PIT tests (token-id and probability order, KS
with a float tolerance η, per position and pooled) and the directional tests (temperature,
truncation, position shift, and the draft leak when the draft's law is given).

Adapters for the engines: ``certify/engine/`` (transformers, llama-cpp-python,
ours, an OpenAI-compatible endpoint) and the negative controls built by wrapping them
(``engines/controls.py``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from spectr_gbv.oracle.acceptance_test import AcceptanceTestResult, acceptance_test
from spectr_gbv.oracle.outcome import verdict_word
from spectr_gbv.oracle.sequence_family import FamilyResult, family_test
from spectr_gbv.oracle.sequence_records import records_from_laws

DEFAULT_ALPHA = 1e-3
# per-token TV put down to float rounding between the engine's kernels and the reference's
# (float32 softmax of logits from a cached vs an uncached forward: measured ≤ 1e-5 on the tiny
# model, tests/certify/engine/test_certify_generate_*.py); the KS threshold moves by η
DEFAULT_TOLERANCE = 1e-3
PIT_STREAM = 0x50495421  # the PIT's uniforms: a stream no engine seeded with ``seed + i`` shares


def softmax64(logits, temperature: float) -> np.ndarray:
    """float64 softmax of ``logits / temperature`` along the last axis (no underflow to an
    exact 0 that float32 would give far in the tail).

    Args:
        logits: float array [..., V].
        temperature: > 0.
    Returns:
        float64 [..., V], rows summing to 1.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    z = np.asarray(logits, dtype=np.float64) / float(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class GenerateCertificate:
    """Result of ``certify_generate``.

    Attributes:
        name: the engine mode certified.
        test: the ``oracle.sequence_family.FamilyResult`` (omnibus rows, directional tests,
            p-values, N, α, detectable deviations).
        n_samples, n_new: sequences and tokens asked per sequence.
        samples_per_second: sequences sampled and tested per second (engine + reference).
        engine_seconds, reference_seconds: time in the engine and in the reference.
        spec_stats: what the engine reports of its speculation (e.g. accepted tokens per
            call), averaged over the samples; empty when it reports nothing.
        acceptance: the ``AcceptanceTestResult`` of the engine's drafts (their accepted count
            against the target's law), or None when the engine does not give its drafts.
        passed: ``test.passed`` and, when tested, ``acceptance.passed``.
    """

    name: str
    test: FamilyResult
    n_samples: int
    n_new: int
    samples_per_second: float
    engine_seconds: float
    reference_seconds: float
    spec_stats: dict = field(default_factory=dict)
    acceptance: AcceptanceTestResult | None = None

    @property
    def passed(self) -> bool:
        return self.test.passed and (self.acceptance is None or self.acceptance.passed)

    @property
    def verdict(self) -> str:
        return verdict_word(self.passed)

    def worst(self):
        """The row or directional test with the smallest p-value relative to its α."""
        return self.test.worst()


def certify_generate(sample: Callable[[Sequence[int], int, int], list], laws: Callable,
                     prompts: Sequence[Sequence[int]], n_new: int, n_samples: int, *,
                     alpha: float = DEFAULT_ALPHA, tolerance: float = DEFAULT_TOLERANCE,
                     seed: int = 0, name: str = "engine", stats: Callable[[], dict] | None = None,
                     drafts: Callable[[], list] | None = None, draft_laws: Callable | None = None,
                     log: Callable[[str], None] | None = None) -> GenerateCertificate:
    """Sample ``n_samples`` continuations and test them against the reference's laws.

    Args:
        sample: the engine: ``sample(prompt_ids, n_new, seed) -> list[int]`` (new token ids,
            at most n_new; fewer on an early stop).  Distinct seeds must give independent
            samples.  An engine that samples faster in one batch (vLLM) also has
            ``sample.sample_many(prompt_lists, n_new, seeds) -> list[list[int]]``, which is
            then called once instead.
        laws: the reference: ``laws(prompt_ids, tokens) -> float64 [len(tokens), V]``, row j
            the target's processed law given prompt_ids + tokens[:j].
        prompts: one or more prompts (token id lists); sample i uses prompts[i % len].
        n_new: tokens per sample, ≥ 1.
        n_samples: samples N, ≥ 1.
        alpha: the certificate's false-alarm rate, in (0, 1).
        tolerance: η of ``oracle.sequence_test`` (per-token TV put down to rounding).
        seed: sample i runs with engine seed ``seed + i``; the PIT's auxiliary uniforms use
            the independent stream ``SeedSequence([seed, PIT_STREAM])``.
        name: the row's name.
        stats: optional callable returning the engine's speculation statistics since the last
            call (a dict of numbers), summed over the samples and averaged in the result.
        drafts: optional callable returning the drafts of the sample just drawn (after each
            ``sample`` call; with ``sample_many``, a list of them, one per sample, after that
            call), each ``(start, draft ids)`` as ``oracle.acceptance_test`` takes them: the
            engine's accepted drafts are then tested against the target's law
            (``acceptance_test``, α/2; the token test gets the other α/2).  Only for engines
            that keep a draft token exactly when it equals their sample (or with probability
            p(draft)): n-gram / prompt-lookup drafts.
        draft_laws: optional ``draft_laws(prompt_ids, tokens) -> float64 [n, V]``: the draft
            model's law along the sample (adds the draft-leak score test).
        log: optional progress callable (one line per ~10 % of the samples).
    Returns:
        ``GenerateCertificate``.
    Raises:
        ValueError: bad n_new, n_samples or prompts; an engine returning more than n_new
            tokens or non-integer ids; a reference of the wrong shape.
    """
    if not (isinstance(n_new, int) and n_new >= 1):
        raise ValueError(f"n_new must be an integer ≥ 1, got {n_new!r}")
    if not (isinstance(n_samples, int) and n_samples >= 1):
        raise ValueError(f"n_samples must be an integer ≥ 1, got {n_samples!r}")
    prompts = [list(map(int, p)) for p in prompts]
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token id lists")
    tokens, rows, draft_logs = [], [], []
    t_engine = t_ref = 0.0
    totals: dict = {}
    every = max(1, n_samples // 10)
    batch = None
    if hasattr(sample, "sample_many"):
        t0 = time.perf_counter()
        batch = sample.sample_many([prompts[i % len(prompts)] for i in range(n_samples)], n_new,
                                   [seed + i for i in range(n_samples)])
        t_engine += time.perf_counter() - t0
        if len(batch) != n_samples:
            raise ValueError(f"{name}: sample_many returned {len(batch)} samples for {n_samples}")
        if drafts is not None:
            draft_logs = list(drafts())
            if len(draft_logs) != n_samples:
                raise ValueError(f"{name}: drafts() gave {len(draft_logs)} draft lists for {n_samples} samples")
    batched_laws = None
    if batch is not None and hasattr(laws, "many"):  # the reference batches its forwards too
        for i, out in enumerate(batch):
            if len(out) > n_new:
                raise ValueError(f"{name}: the engine returned {len(out)} tokens for n_new = {n_new}")
        t0 = time.perf_counter()
        batched_laws = laws.many([(prompts[i % len(prompts)], [int(t) for t in batch[i]]) for i in range(n_samples)])
        t_ref += time.perf_counter() - t0
    for i in range(n_samples):
        prompt = prompts[i % len(prompts)]
        t0 = time.perf_counter()
        out = [int(t) for t in (batch[i] if batch is not None else sample(prompt, n_new, seed + i))]
        t1 = time.perf_counter()
        if batch is None and drafts is not None:
            draft_logs.append(list(drafts()))
        if len(out) > n_new:
            raise ValueError(f"{name}: the engine returned {len(out)} tokens for n_new = {n_new}")
        if batched_laws is not None:
            law = np.asarray(batched_laws[i], dtype=np.float64) if out else np.zeros((0, 1))
        else:
            law = np.asarray(laws(prompt, out), dtype=np.float64) if out else np.zeros((0, 1))
        t_ref += time.perf_counter() - t1
        t_engine += t1 - t0
        if out and (law.ndim != 2 or law.shape[0] != len(out)):
            raise ValueError(f"{name}: the reference returned shape {law.shape} for {len(out)} tokens")
        tokens.append(out)
        rows.append(law)
        if stats is not None and (batch is None or i == 0):
            for k, v in stats().items():
                totals[k] = totals.get(k, 0.0) + float(v)
        if log is not None and (i + 1) % every == 0:
            log(f"{name}: {i + 1}/{n_samples} samples ({t_engine:.0f} s engine, {t_ref:.0f} s reference)")
    records = [records_from_laws(t, law, draft_laws(prompts[i % len(prompts)], t) if draft_laws and t else None)
               if t else [] for i, (t, law) in enumerate(zip(tokens, rows))]
    pit_seed = int(np.random.SeedSequence([seed, PIT_STREAM]).generate_state(1)[0])
    a_tokens = alpha / 2 if drafts is not None else alpha
    test = family_test(records, alpha=a_tokens, tolerance=tolerance, seed=pit_seed)
    acc = (acceptance_test(tokens, rows, draft_logs, alpha=alpha / 2, tolerance=tolerance)
           if drafts is not None else None)
    spent = t_engine + t_ref
    spec = {k: v / n_samples for k, v in totals.items()}
    return GenerateCertificate(name, test, n_samples, n_new,
                               n_samples / spent if spent > 0 else math.nan, t_engine, t_ref, spec, acc)


# -- reporting ---------------------------------------------------------------------------------

HEADER = ("engine mode", "N", "tokens", "alpha", "eta", "p (id)", "p (prob)", "worst position p",
          "d (0.99)", "directional: worst p", "accepted / expected (p, δ 0.99)", "spec", "samples/s", "verdict")


def _p(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def row_cells(cert: GenerateCertificate) -> tuple[str, ...]:
    """One certificate as table cells: pooled p-values (id and probability order), the smallest
    per-position p, the pooled detectable PIT deviation d at power 0.99, the directional test
    with the smallest p, the engine's speculation statistics and the verdict."""
    t = cert.test
    pos = [r for r in t.rows if r.scope.startswith("position")]
    worst = min(pos, key=lambda r: r.pvalue) if pos else None
    spec = ", ".join(f"{k} {v:.2f}" for k, v in cert.spec_stats.items()) or "-"
    a = cert.acceptance
    acc = (f"{a.accepted} / {a.expected:.1f} of {a.n} (p {_p(a.pvalue)}, δ {a.detectable:.3f})"
           if a is not None else "-")
    d = min(t.directional, key=lambda r: r.pvalue / r.alpha) if t.directional else None
    return (cert.name, str(cert.n_samples), str(t.n_tokens), f"{t.alpha:g}", f"{t.tolerance:g}",
            _p(t.pooled("id").pvalue), _p(t.pooled("probability").pvalue),
            f"{_p(worst.pvalue)} ({worst.scope}, {worst.order})" if worst else "-",
            f"{t.detectable:.3f}", f"{_p(d.pvalue)} ({d.name})" if d else "-", acc, spec,
            f"{cert.samples_per_second:.2f}",
            cert.verdict + (f" ({t.impossible} impossible tokens)" if t.impossible else ""))


def text_table(certs: Sequence[GenerateCertificate]) -> str:
    """Aligned plain-text table of certificates."""
    cells = [HEADER] + [row_cells(c) for c in certs]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for c in cells)


POWER_NOTE = (
    "Tests: randomized PIT of every token under the reference's law given its sampled prefix "
    "(Rosenblatt 1952; Brockwell 2007; Czado, Gneiting & Held 2009), in token-id and in probability "
    "order; KS against Uniform(0,1) with the exact kstwo law and threshold moved by eta (float "
    "rounding), pooled and per position; and the directional tests, each an e-value exact at every "
    "N (temperature, tokens outside the top-p / min-p / top-k levels, position shift, draft leak "
    "where the draft's law is known: oracle/sequence_scores.py).  Bonferroni within each mode (alpha/4 the omnibus tests: "
    "alpha/8 pooled, alpha/8 positions; 3 alpha/4 the directional tests, split equally).  d (0.99): "
    "the pooled test catches "
    "with power >= 0.99 any defect whose PIT CDF is off by d at its median (e.g. mass d moved "
    "monotonically in one order: per-token TV d); a smaller or finely interleaved deviation may "
    "pass.  accepted / expected: the draft tokens the engine kept against their expected number "
    "under the target's law, over the draft positions visited (engines that give their n-gram "
    "drafts; martingale z-test, alpha/2 of the mode's alpha, the token tests the other alpha/2; "
    "delta: the mean acceptance-probability shift caught with power 0.99).  spec: the engine's own "
    "speculation counters per sample.")


def to_json(cert: GenerateCertificate) -> dict:
    """A certificate as a JSON-ready dict (every row of its test)."""
    t = cert.test
    return {"name": cert.name, "verdict": cert.verdict, "n_samples": cert.n_samples, "n_new": cert.n_new,
            "alpha": t.alpha, "tolerance": t.tolerance, "n_tokens": t.n_tokens, "early_stops": t.early_stops,
            "impossible": t.impossible, "detectable": t.detectable, "samples_per_second": cert.samples_per_second,
            "engine_seconds": cert.engine_seconds, "reference_seconds": cert.reference_seconds,
            "spec_stats": cert.spec_stats,
            "acceptance": (None if cert.acceptance is None else
                           {k: getattr(cert.acceptance, k) for k in (
                               "statistic", "pvalue", "n", "drafts", "proposed", "accepted", "expected",
                               "variance", "alpha", "tolerance", "impossible", "detectable", "passed")}),
            "rows": [{"scope": r.scope, "order": r.order, "test": r.test, "statistic": r.statistic,
                      "pvalue": r.pvalue, "n": r.n, "alpha": r.alpha, "detectable": r.detectable,
                      "passed": r.passed} for r in t.rows],
            "directional": [{"name": d.name, "statistic": d.statistic, "pvalue": d.pvalue, "n": d.n,
                             "alpha": d.alpha, "detectable": d.detectable, "unit": d.unit, "passed": d.passed}
                            for d in t.directional]}
