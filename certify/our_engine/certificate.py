"""Statistical certification of the speculative-decoding ENGINE on a real model, end to end.

``spectr-gbv certify our-engine`` (cli/certify.py) runs ``certify_engine``: the
whole engine (``gpu_backend.engine.speculative.SpeculativeEngine``: KV caches, packed token tree, sampling
of the drafts, Algorithm 2's modified rows, the torch verifier) generates from one fixed prompt
for N distinct seeds per rule, and two checks are made on those same runs:

(a) **First-token law.**  The first emitted token of the N runs is G-tested
    (``oracle.gtest.gtest``) against the target's exact law after the prompt: ONE uncached
    forward call of the target on the prompt, its last logits through the engine's own
    ``sampling.probabilities`` (temperature, top-k, top-p, float32 softmax), in float64,
    renormalised.  This is the losslessness claim itself, but at a real vocabulary
    (V = 49,152 for SmolLM2) and N of a few hundred the G-test pools most cells: the reported
    δ (``GTestResult.detectable_tv_law``: the power-0.99 bound on the pooled cells plus the
    pooled mass) is large, often 1 (no guarantee); it is reported as it is.  The engine's own
    (cached) first target row differs from this uncached one by ≤ 2e-5 relative in float32
    (tests/certify/our_engine/test_engine_certify.py), far below any δ reachable here.
(b) **Acceptance lengths given the rows.**  Every iteration of those runs is recorded
    (``on_iteration``); its τ (the verifier's, before truncation) is compared with the exact law
    of τ of the *reference* rule (``reference.rules.get_rule(base)``) given the very rows the
    verifier got (``IterationRecord.draft_tokens`` [K, L], ``draft_probs`` [K, L, V],
    ``target_probs`` [K, L+1, V], float32 → float64, renormalised): ``tau_law``.  Two tests:
    the paired mean difference Σ_i (τ_i − E[τ | rows_i]) against 0 with the exact variance
    Σ_i Var[τ | rows_i] (a two-sided z-test: conditionally on the past each term has mean 0
    and that variance, so the sum is a martingale and the martingale CLT applies), and the τ
    counts against Σ_i P_i(τ = t) (a G-test against the averaged law; τ's of different
    iterations are not identically distributed, which only lowers the counts' variance, so the
    false-alarm rate stays ≤ α up to the χ² approximation).

Each rule is one row: the three tests at α/3 each (Bonferroni).  A correct (lossless) rule
must pass all three; a planted wrong rule (``registry.planted()``: the real torch verifier
with one deliberate change, run through the engine with ``verifier=`` and ``rule=`` its base)
must be caught by (b) — one of its two τ tests rejects at α/3.

Designed power of the planted rows: each planted defect the engine runs has a reference
analogue whose exact τ law given an iteration's rows is known (``planted_laws``), so the shift
of mean τ it causes on the rows run, and the mean test's power at α/3 with them
(``planted_power``: ``oracle.mean_tests.paired_mean_power``, normal approximation), are computed,
not hoped for.  A planted row runs the shape ``planted_shape`` chose for a larger effect (ρ = 1
defects K = 3; the other defects with an exact law blocks of L = 8) and runs on past N, 10 runs at a time, until that power is ≥ ``TARGET_POWER`` = 0.99
(at most ``PLANTED_MAX_FACTOR`` × N); the row states N, the shift, the TV of the averaged τ
laws and the power (a lower bound on the row's: it is caught when either τ test rejects).
Defects without an analogue (``planted_mdbv_kseq_fallback``) run N and state no power.

Power of the rule rows themselves: the planted rows run another shape and N than the rule rows,
so "planted caught" does not say that a rule row would catch the defect.  Each lossless row
therefore computes, on its own rows, the τ law of each planted defect of its rule that has an
analogue (``row_defects``) and states the mean test's power against it at its own K, L and N
(``DefectPower``, ``defect_power``); when that power is below ``TARGET_POWER`` the table's lines
(``power_lines``) and the summary say so, with the N that would reach it (``runs_for_power``)
and that N times the row's measured seconds per run.

Why ``tau_law`` and not ``oracle.certify.exact_verdict_law``: the full law enumerates the
emitted token too (V branches per iteration: far too slow at V = 49,152; measured in
benchmarks/ENGINE_CERTIFICATE.md).  Every reference
rule asks its source for coins first and draws the correction/bonus token once, last
(``reference.randomness``), so τ is fixed before that draw: ``tau_law`` enumerates the coins
only and answers the draw with a fixed token of positive weight (a coin or draw after it
raises).  tests/certify/our_engine/test_engine_certify.py checks it equals the τ marginal of
``exact_verdict_law`` on toy rows of every rule.

Skipped: the rules with an ``engine_skip`` in their spec (``mdbv``: its reference rule plans
every row on the host, seconds to minutes per iteration at this vocabulary).

Setup (the CI pair): target = the embedded "tiny" model (SmolLM2-135M-Instruct) in float32 at
T = 1; draft = the same model at T = ``DEFAULT_DRAFT_TEMPERATURE`` (the engine's
``draft_sampling``: a proper different distribution, same KV-cache behaviour).  ``certification_pair``
also takes another target/draft pair (e.g. "target"/"draft": the Qwen2.5-Coder pair), then the
draft is used at its own temperature T unless ``draft_temperature`` is given.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from spectr_gbv.oracle.gtest import gtest
from spectr_gbv.oracle.mean_tests import PairedMeanTestResult, paired_mean_test
from spectr_gbv.reference.rules import registry

from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L, DEFAULT_RULE
from spectr_gbv.certify.our_engine.power import TARGET_POWER, defect_power, format_power, planted_power
from spectr_gbv.certify.our_engine.runs import LOG_EVERY, Runs, extend_runs, run_rule, target_first_token_law

DEFAULT_PROMPT = "The capital of France is"
DEFAULT_DRAFT_TEMPERATURE = 1.5
DEFAULT_ENGINE_ALPHA = 1e-3
DEFAULT_ENGINE_SEEDS = 100
QUICK_ENGINE_SEEDS = 60
DEFAULT_MAX_NEW_TOKENS = 16
CI_RULES = (DEFAULT_RULE, "sd", "gbv")
TESTS_PER_ROW = 3
# a planted row runs until its mean test's power at α/3, computed from the exact laws of the
# rows it ran (``planted_power``), reaches TARGET_POWER, from n_seeds up to
# PLANTED_MAX_FACTOR × n_seeds runs
PLANTED_MAX_FACTOR = 4
# the planted rows' shape (``planted_shape``), chosen for a larger known effect: ρ = 1 defects at
# K = RHO1_K, the other defects with an exact law at L = PLANTED_L (pilot runs on the tiny pair:
# benchmarks/ENGINE_CERTIFICATE.md, "Designed power")
PLANTED_L = 8
RHO1_K = 3


def __getattr__(name: str):
    if name == "SKIPPED":  # live: {rule: reason} of the specs' ``engine_skip``
        return registry.engine_skipped()
    raise AttributeError(name)


def engine_rules() -> tuple[str, ...]:
    """Every registered lossless rule the engine runs and this module can certify (the
    registry's lossless rules without an ``engine_skip``)."""
    skipped = registry.engine_skipped()
    return tuple(r for r in registry.names(lossless=True) if r not in skipped)


def planted_shape(name: str, K: int, L: int) -> tuple[int, int]:
    """The (K, L) a planted row runs (the lossless rows run (K, L)): ρ = 1 defects at K =
    max(K, ``RHO1_K``) and L; the other defects with an exact law (``planted_laws.has_law``) at
    K and L = ``PLANTED_L``; defects without one at (K, L), as measured before.  Single-draft
    bases run K = 1 whatever is asked (``run_rule``).  The measurements behind these choices:
    the comment at ``PLANTED_L``."""
    from spectr_gbv.certify.planted_laws import has_law

    if name.endswith("_rho1"):
        return max(K, RHO1_K), L
    if has_law(name):
        return K, PLANTED_L
    return K, L


def planted_for(rules) -> tuple[str, ...]:
    """The planted defects (``RuleSpec.planted``) whose base rule is in ``rules`` and that the
    engine certificate runs (``Planted.engine``: their law of τ differs, measured on the engine)."""
    return tuple(name for name, p in registry.planted().items() if p.base in rules and p.engine)


# -- tests -------------------------------------------------------------------------------------

def mean_test(taus, laws, alpha: float) -> PairedMeanTestResult:
    """The paired mean test of (b): observed τ's against the means and variances of their exact
    laws (float64 [L+1] each), through ``oracle.mean_tests.paired_mean_test``.

    Raises:
        ValueError: no iterations, or taus and laws of different lengths.
    """
    if not taus or len(taus) != len(laws):
        raise ValueError(f"need as many laws as taus (> 0), got {len(taus)} and {len(laws)}")
    t = np.arange(len(laws[0]))
    means = np.array([float(p @ t) for p in laws])
    variances = np.array([max(float(p @ t**2) - m * m, 0.0) for p, m in zip(laws, means)])
    return paired_mean_test(taus, means, variances, alpha)


def tau_gtest(taus, laws, alpha: float):
    """G-test of the τ counts against the averaged exact law Σ_i P_i / n
    (``oracle.gtest.GTestResult``)."""
    mix = np.mean(np.stack(laws), axis=0)
    mix = mix / mix.sum()
    counts = np.bincount(np.asarray(taus, dtype=np.int64), minlength=len(mix))
    return gtest({t: int(c) for t, c in enumerate(counts) if c},
                 {t: float(p) for t, p in enumerate(mix)}, alpha)


@dataclass
class EngineRow:
    """One rule's certification on the engine.

    Attributes:
        rule, base, kind ("lossless" or "planted"), K, L, n (runs), iterations, alpha (the
        row's; each test at alpha/3).
        first_pvalue, first_delta: (a)'s G-test p-value and detectable TV of the whole law.
        mean_tau, expected_tau, mean_z, mean_pvalue, mean_shift: (b)'s mean test.
        tau_pvalue, tau_delta: (b)'s G-test of the τ counts.
        effect_shift, effect_tv, power: a planted row's ``PlantedPower`` on its runs (NaN for a
            lossless row or a defect without an exact law).
        defect_powers: a lossless row's ``DefectPower`` against each planted defect of its rule
            with an exact law (``row_defects``), at the row's own K, L, N and rows; empty for a
            planted row.  ``defect_power``: the smallest of their powers (NaN when none).
        seconds: wall time (generation + laws + tests); error: a one-line error, if any.
    """

    rule: str
    base: str
    kind: str
    K: int
    L: int
    n: int
    iterations: int
    alpha: float
    first_pvalue: float = math.nan
    first_delta: float = math.nan
    mean_tau: float = math.nan
    expected_tau: float = math.nan
    mean_z: float = math.nan
    mean_pvalue: float = math.nan
    mean_shift: float = math.nan
    tau_pvalue: float = math.nan
    tau_delta: float = math.nan
    effect_shift: float = math.nan
    effect_tv: float = math.nan
    power: float = math.nan
    seconds: float = 0.0
    error: str = ""
    defect_powers: tuple = ()

    @property
    def defect_power(self) -> float:
        return min((d.power for d in self.defect_powers), default=math.nan)

    @property
    def rejected_first(self) -> bool:
        return not self.first_pvalue >= self.alpha / TESTS_PER_ROW

    @property
    def rejected_tau(self) -> bool:
        a = self.alpha / TESTS_PER_ROW
        return not (self.mean_pvalue >= a and self.tau_pvalue >= a)

    @property
    def ok(self) -> bool:
        """A lossless row passes all three tests; a planted row is caught by (b)."""
        if self.error:
            return False
        if self.kind == "planted":
            return self.rejected_tau
        return not (self.rejected_first or self.rejected_tau)

    @property
    def verdict(self) -> str:
        if self.error:
            return "ERROR"
        if self.kind == "planted":
            return "CAUGHT" if self.rejected_tau else "MISSED"
        return "PASS" if self.ok else "FAIL"

    def to_json(self) -> dict:
        def num(x):
            return x if isinstance(x, (int, str)) or math.isfinite(x) else str(x)

        out = {k: num(v) for k, v in self.__dict__.items() if k != "defect_powers"}
        out["defect_powers"] = [{k: num(v) for k, v in d.__dict__.items()} for d in self.defect_powers]
        out["verdict"] = self.verdict
        return out


def certify_runs(runs: Runs, first_law: np.ndarray, alpha: float, kind: str) -> EngineRow:
    """(a) and (b) on one rule's runs; each test at alpha/3."""
    a = alpha / TESTS_PER_ROW
    row = EngineRow(runs.name, runs.base, kind, runs.K, runs.L, len(runs.first_tokens),
                    len(runs.taus), alpha)
    counts: dict[int, int] = {}
    for t in runs.first_tokens:
        counts[t] = counts.get(t, 0) + 1
    law = {i: float(p) for i, p in enumerate(first_law) if p > 0}
    first = gtest(counts, law, a)
    row.first_pvalue, row.first_delta = first.pvalue, first.detectable_tv_law
    m = mean_test(runs.taus, runs.laws, a)
    row.mean_tau, row.expected_tau, row.mean_z, row.mean_pvalue = m.mean, m.exact_mean, m.statistic, m.pvalue
    row.mean_shift = m.detectable_shift
    g = tau_gtest(runs.taus, runs.laws, a)
    row.tau_pvalue, row.tau_delta = g.pvalue, g.detectable_tv_law
    pw = planted_power(runs, a) if kind == "planted" else None
    if pw is not None:
        row.effect_shift, row.effect_tv, row.power = pw.shift, pw.tv, pw.power
    if kind != "planted":
        per_run = (runs.generate_s + runs.law_s) / max(len(runs.first_tokens), 1)
        row.defect_powers = tuple(d for d in (defect_power(runs, name, a, per_run or math.nan)
                                              for name in sorted(runs.defect_laws)) if d is not None)
    return row


@dataclass
class EngineCertification:
    """The rows and the setup they were measured on (``setup``: a one-line description)."""

    rows: list[EngineRow]
    setup: str

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)


def certify_engine(target, draft, prompt_ids, rules, planted=None, *, n_seeds: int = DEFAULT_ENGINE_SEEDS,
                   max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, alpha: float = DEFAULT_ENGINE_ALPHA,
                   sampling=None, draft_sampling=None, K: int = DEFAULT_K, L: int = DEFAULT_L,
                   first_seed: int = 0, eos_token_ids=(), setup: str = "",
                   progress: Callable[[EngineRow], None] | None = None,
                   log: Callable[[str], None] | None = None,
                   planted_shapes: bool = True, backend=None) -> EngineCertification:
    """Certify the engine for each rule in ``rules`` (and each planted rule in ``planted``;
    default ``planted_for(rules)``).

    Args:
        target, draft: the models of ``backend`` (None: torch, transformers causal LMs; the
            same object for the tempered-copy pair); a pair's own backend is
            ``ModelPair.backend``.
        prompt_ids: list of int token ids.
        rules: registered lossless rules (not ``SKIPPED``); planted: names of
            ``registry.planted()``.
        n_seeds: N ≥ 2 runs per rule; max_new_tokens: tokens per run (≥ 1; more → more
            iterations for (b)); alpha in (0, 1): per row.
        sampling, draft_sampling: ``SamplingConfig`` of target and draft (default T = 1 and
            T = ``DEFAULT_DRAFT_TEMPERATURE``).
        progress: called with each row when it is done.
        log: called with a progress line every ``LOG_EVERY`` runs or ``LOG_SECONDS`` s of a rule.
        planted_shapes: run each planted row at ``planted_shape`` (default); False: at (K, L).
    A planted row with an exact law (``planted_laws``) runs N = n_seeds, then more runs (10 at
    a time) until its mean test's power at α/3 on the rows it ran reaches ``TARGET_POWER``
    (``planted_power``), at most ``PLANTED_MAX_FACTOR`` × n_seeds; its row states N, the effect
    (mean τ shift, TV of the τ laws) and the power.
    Returns:
        EngineCertification.  A rule whose run raised gets an ERROR row (the message's
        first line), which fails the certification.
    Raises:
        ValueError: a rule of ``SKIPPED``, an unknown rule, n_seeds < 2, alpha outside (0, 1).
    """
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 2:
        raise ValueError(f"n_seeds must be an integer >= 2, got {n_seeds!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    skipped = registry.engine_skipped()
    for r in rules:
        if r in skipped:
            raise ValueError(f"rule {r!r} cannot be certified on the engine: {skipped[r]}")
        registry.spec(r)
    sampling = sampling or SamplingConfig(1.0)
    draft_sampling = draft_sampling or SamplingConfig(DEFAULT_DRAFT_TEMPERATURE)
    planted = planted_for(rules) if planted is None else tuple(planted)
    first_law = target_first_token_law(target, prompt_ids, sampling, backend)
    rows = []
    for name, kind in [(r, "lossless") for r in rules] + [(p, "planted") for p in planted]:
        t0 = time.perf_counter()
        row_K, row_L = planted_shape(name, K, L) if kind == "planted" and planted_shapes else (K, L)
        try:
            runs = run_rule(target, draft, name, prompt_ids, n_seeds, max_new_tokens, sampling,
                            draft_sampling, row_K, row_L, first_seed, eos_token_ids, log, backend)
            if kind == "planted":  # N chosen from the effect: run on until the power is reached
                most = PLANTED_MAX_FACTOR * n_seeds
                while len(runs.first_tokens) < most:
                    pw = planted_power(runs, alpha / TESTS_PER_ROW)
                    if pw is None or not pw.power < TARGET_POWER:
                        break
                    done = len(runs.first_tokens)
                    if log is not None:
                        log(f"{name}: power {pw.power:.3f} < {TARGET_POWER} at N = {done} (mean τ shift "
                            f"{pw.shift:+.3f}): running more")
                    extend_runs(runs, run_rule(target, draft, name, prompt_ids, min(LOG_EVERY, most - done),
                                           max_new_tokens, sampling, draft_sampling, row_K, row_L,
                                           first_seed + done, eos_token_ids, log, backend))
            row = certify_runs(runs, first_law, alpha, kind)
        except (ValueError, RuntimeError) as err:
            row = EngineRow(name, name, kind, row_K, row_L, n_seeds, 0, alpha,
                            error=(str(err).splitlines() or [type(err).__name__])[0])
        row.seconds = time.perf_counter() - t0
        rows.append(row)
        if progress is not None:
            progress(row)
    return EngineCertification(rows, setup)


# -- loading and reporting ---------------------------------------------------------------------

def certification_pair(target_name: str = "tiny", draft_name: str | None = None, dtype="float32",
                       device="cpu", backend: str = "torch"):
    """The models of an engine certification (``models.pair.load_pair``: a separate draft is
    checked to share the target's tokenizer).

    Args:
        target_name: a ``weights.load_causal_lm`` spec (default the embedded "tiny" SmolLM2).
        draft_name: None: the target itself (tempered by the engine's draft sampling);
            else another spec (e.g. "target"/"draft": the Qwen2.5-Coder pair).
        backend: "torch" (transformers, ``dtype``) or "llama.cpp" (the GGUF files on
            llama.cpp's kernels, ``llamacpp.pair``; ``dtype`` and ``device`` unused; with
            ``draft_name`` None the target's file is loaded twice: draft and target need
            their own caches).
    Returns:
        ``models.pair.ModelPair`` (draft: the target itself when ``draft_name`` is None on
        torch; ``backend``: the engine backend to hand ``certify_engine``).
    Raises:
        ModelLoadError: a model cannot be loaded (``models.pair``; the loader's OSError or
            ValueError is its ``__cause__``).
        ValueError: draft and target do not fit together (vocabulary or tokenizer).
    """
    if backend == "llama.cpp":
        from spectr_gbv.gpu_backend.llamacpp.pair import load_llamacpp_pair

        return load_llamacpp_pair(target_name, draft_name or target_name)
    if backend != "torch":
        raise ValueError(f"backend must be 'torch' or 'llama.cpp', got {backend!r}")
    from spectr_gbv.gpu_backend.models.pair import load_pair as load

    pair = load(target_name, draft_name, dtype, device=device)
    return pair if draft_name is not None else replace(pair, draft=pair.target)


# "power": a planted row's against its defect; a lossless row's against its rule's weakest-caught
# planted defect at the row's own K, L, N (``EngineRow.defect_power``; ``power_lines`` say more)
HEADER = ("rule", "kind", "K", "L", "N", "iters", "alpha", "first p", "first δ",
          "mean τ", "E[τ]", "z", "mean p", "τ-law p", "τ-law δ", "shift", "TV", "power", "verdict", "s")


def _cells(row: EngineRow) -> tuple[str, ...]:
    def f(x, spec):
        return "-" if isinstance(x, float) and math.isnan(x) else format(x, spec)

    name = row.rule if row.kind == "lossless" else f"{row.rule} (vs {row.base})"
    return (name, row.kind, str(row.K), str(row.L), str(row.n), str(row.iterations),
            f"{row.alpha:g}", f(row.first_pvalue, ".3g"), f(row.first_delta, ".3f"),
            f(row.mean_tau, ".3f"), f(row.expected_tau, ".3f"), f(row.mean_z, ".2f"),
            f(row.mean_pvalue, ".3g"), f(row.tau_pvalue, ".3g"), f(row.tau_delta, ".3f"),
            f(row.effect_shift, "+.3f"), f(row.effect_tv, ".3f"),
            format_power(row.power if row.kind == "planted" else row.defect_power), row.verdict,
            f"{row.seconds:.0f}")


def text_table(rows: list[EngineRow]) -> str:
    """The rows as an aligned plain-text table (errors listed below it)."""
    cells = [HEADER] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for c in cells]
    lines += [f"{r.rule}: {r.error}" for r in rows if r.error]
    lines += power_lines(rows)
    return "\n".join(lines)


def power_lines(rows: list[EngineRow]) -> list[str]:
    """Per lossless row, its power against each of its rule's planted defects at its own
    shape and N (``DefectPower.sentence``), or why none is stated."""
    out = []
    for r in rows:
        if r.kind == "planted" or r.error:
            continue
        if not r.defect_powers:
            out.append(f"{r.rule}: no planted defect with an exact τ law: power not computed")
        out += [f"{r.rule}: {d.sentence()}" for d in r.defect_powers]
    return out


def summary(cert: EngineCertification) -> str:
    lossless = [r for r in cert.rows if r.kind == "lossless"]
    planted = [r for r in cert.rows if r.kind == "planted"]
    word = "CERTIFIED" if cert.ok else "NOT CERTIFIED"
    skipped = registry.engine_skipped()
    stated = [r for r in lossless if r.defect_powers]
    weak = [r.rule for r in stated if not r.defect_power >= TARGET_POWER]
    power = (f"; {len(stated) - len(weak)}/{len(stated)} lossless rows have power ≥ {TARGET_POWER} "
             f"against their rule's planted defects at their own K, L and N"
             + (f" (NOT {', '.join(weak)}: the lines under the table give the N that would)" if weak else "")
             ) if stated else ""
    return (f"engine {word}: {sum(r.ok for r in lossless)}/{len(lossless)} lossless rules pass, "
            f"{sum(r.ok for r in planted)}/{len(planted)} planted wrong rules caught; "
            f"skipped: {', '.join(sorted(skipped))} ({'; '.join(skipped.values())})" + power)


def quick_certification(progress: Callable[[EngineRow], None] | None = None,
                        log: Callable[[str], None] | None = None,
                        backend: str = "torch") -> EngineCertification:
    """``certify our-engine --quick`` on its defaults: the embedded "tiny" SmolLM2 in float32 as
    target (T = 1) and itself at T = ``DEFAULT_DRAFT_TEMPERATURE`` as draft, ``CI_RULES`` and
    their planted rules, N = ``QUICK_ENGINE_SEEDS`` runs of ``DEFAULT_MAX_NEW_TOKENS`` tokens
    from ``DEFAULT_PROMPT``, α = ``DEFAULT_ENGINE_ALPHA`` per row (``spectr-gbv report --full``
    calls it).  ``progress`` and ``log``: as in ``certify_engine`` (``log`` also hears of the
    model's loading).  ``backend``: "torch" (float32 transformers) or "llama.cpp" (the GGUF
    file itself on llama.cpp's kernels, ``certification_pair``).

    Raises:
        OSError / ValueError: the embedded model cannot be loaded.
    """
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    if log is not None:
        log(f"loading the embedded tiny model ({backend})")
    pair = certification_pair(backend=backend)
    ids = encode_prompt(pair.tokenizer, DEFAULT_PROMPT, chat=False)
    weights = "float32" if backend == "torch" else "GGUF Q4_1 on llama.cpp"
    setup = (f"target tiny ({weights}, T = 1), draft tiny (T = {DEFAULT_DRAFT_TEMPERATURE:g}), prompt "
             f"{DEFAULT_PROMPT!r} ({len(ids)} tokens), {DEFAULT_MAX_NEW_TOKENS} new tokens per run, cpu")
    return certify_engine(pair.target, pair.draft, ids, list(CI_RULES), n_seeds=QUICK_ENGINE_SEEDS,
                          max_new_tokens=DEFAULT_MAX_NEW_TOKENS, alpha=DEFAULT_ENGINE_ALPHA,
                          sampling=SamplingConfig(1.0),
                          draft_sampling=SamplingConfig(DEFAULT_DRAFT_TEMPERATURE),
                          eos_token_ids=pair.eos, setup=setup, progress=progress, log=log,
                          backend=pair.backend)
