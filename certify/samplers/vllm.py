"""Certification of vLLM's own rejection samplers (``spectr-gbv certify samplers vllm``).

What is certified: the samplers of the installed vLLM (gpu_backend/adapters/vllm_samplers.py),
each through ``from_vllm_layout`` (gpu_backend/adapters/vllm_adapter.py: the batched contract
→ vLLM's flattened layout and back) and ``oracle.harness.certify_verifier`` on the built-in
case families (``oracle.certify_cases.FAMILIES``), against the registered rule it claims:

    sampler                     mode            draft rows          claims   expected
    Model Runner V2             standard        draft logits        sd       CERTIFIED
    Model Runner V2             standard        one-hot (n-gram)    sd       CERTIFIED
    Model Runner V2             block           draft logits        bv       CERTIFIED
    Model Runner V2             block           one-hot (n-gram)    bv       CERTIFIED
    v1 RejectionSampler         random          draft_probs         sd       CERTIFIED
    v1 RejectionSampler         random          None (n-gram)       sd       CERTIFIED
    v1 RejectionSampler, CPU    random          draft_probs         sd       CERTIFIED
    v1 RejectionSampler, CPU    random          None (n-gram)       sd       CERTIFIED
    Model Runner V2             synthetic       draft logits        sd       CAUGHT (lossy by design)
    v1 RejectionSampler         synthetic       draft_probs         sd       CAUGHT (lossy by design)

Plus, per sampler, two deterministic checks (``replay_checks``): the same seeds give the same
outputs, and a request's output does not depend on the other requests of its batch (alone and
in a permuted batch of another size: ``layout_batch_checks``).  Each case's certification also
runs the harness's seed checks through the adapter (oracle/seed_contract.py; they are not rows
of this table).

Where vLLM cannot be imported in this interpreter, ``locate_python`` finds the interpreter of
the vLLM environment that ``scripts/install.sh --vllm`` makes (``.venv-vllm`` beside the
checkout, or ``$SPECTR_GBV_VLLM_PYTHON``) and the CLI runs there.  Which implementation ran
is stated on every row (``Row.implementation``):

- the Triton kernels under Triton's interpreter (gpu_backend/adapters/vllm_shims.py, ``SHIMS``),
  on a CPU: the code a CUDA user's engine runs, about 30-70 ms per sampled request on one core,
  which sets the CPU run's N (``CPU_N``);
- vLLM's C++ CPU replacements of those kernels, no shim (the rows marked "CPU engine path"):
  the code vLLM's CPU engine runs (``vllm_shims.use_native_cpu_kernels``), about 1 ms per call,
  N = ``NATIVE_N``; v1 only (the CPU engine has no Model Runner V2, and its C++ kernels refuse
  synthetic acceptance);
- on a CUDA GPU, the Triton kernels natively (scripts/device_check.sh, N = 2·10^4 per case; the
  CPU engine path rows are skipped there).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field

from spectr_gbv.oracle.outcome import verdict_word

CPU_N = 2_000  # per case on a CPU (interpreted kernels); the detectable δ of each row says what it resolves
GPU_N = 20_000
NATIVE_N = 20_000  # per case through vLLM's C++ CPU kernels (about 1 ms per call)
DEFAULT_ALPHA = 1e-6
SYNTHETIC_RATES = (0.8, 0.6, 0.4)  # unconditional acceptance rates per depth (vLLM's synthetic_acceptance_rates)
SYNTHETIC_FAMILIES = ("toy", "prefix")
L = 3


@dataclass(frozen=True)
class Sampler:
    """One vLLM sampler setting certified (module doc's table)."""

    label: str  # e.g. "MRV2 standard, draft logits"
    kind: str  # vllm_samplers.sampler kind
    rule: str
    one_hot: bool = False
    synthetic: bool = False
    native: bool = False  # through vLLM's C++ CPU kernels (the CPU engine's path), no shim

    @property
    def expect_pass(self) -> bool:
        return not self.synthetic

    def build(self):
        """The adapter: a verifier of the batched contract calling vLLM's sampler."""
        from spectr_gbv.gpu_backend.adapters.vllm_adapter import from_vllm_layout
        from spectr_gbv.gpu_backend.adapters.vllm_samplers import sampler

        kwargs = {"rates": SYNTHETIC_RATES} if self.synthetic else {}
        # synthetic acceptance also overrides greedy requests (accepts with its rate), so the
        # adapter's exact greedy fillers would stop it with a ValueError before its law is
        # measured: they are left out for it (its certified requests keep T ≠ 1)
        return from_vllm_layout(sampler(self.kind, **kwargs), one_hot_drafts=self.one_hot,
                                fillers=not self.synthetic)


SAMPLERS = (
    Sampler("MRV2 rejection_sample, standard, draft logits", "mrv2-standard", "sd"),
    Sampler("MRV2 rejection_sample, standard, one-hot drafts (n-gram)", "mrv2-standard", "sd", one_hot=True),
    Sampler("MRV2 rejection_sample, block verification, draft logits", "mrv2-block", "bv"),
    Sampler("MRV2 rejection_sample, block verification, one-hot drafts", "mrv2-block", "bv", one_hot=True),
    Sampler("v1 RejectionSampler, draft_probs", "v1", "sd"),
    Sampler("v1 RejectionSampler, draft_probs=None (n-gram)", "v1", "sd", one_hot=True),
    Sampler("MRV2 rejection_sample, synthetic acceptance", "mrv2-synthetic", "sd", synthetic=True),
    Sampler("v1 RejectionSampler, synthetic acceptance", "v1-synthetic", "sd", synthetic=True),
    Sampler("v1 RejectionSampler, draft_probs, CPU engine path", "v1", "sd", native=True),
    Sampler("v1 RejectionSampler, draft_probs=None (n-gram), CPU engine path", "v1", "sd", one_hot=True,
            native=True),
)

IMPLEMENTATIONS = {
    "interpreted": "Triton kernels under Triton's interpreter, with our shims",
    "native-cpu": "vLLM's C++ CPU kernels (CpuPlatform overrides), no shim",
    "cuda": "Triton kernels, CUDA",
}


@dataclass
class Row:
    """One certified (sampler, family) case, or one deterministic check (family "replay" /
    "batch independence")."""

    sampler: str
    rule: str
    family: str
    expect_pass: bool
    passed: bool
    n: int
    alpha: float
    detectable_delta: float
    measured_tv: float
    pvalue: float
    failed_tests: tuple = ()
    seconds: float = 0.0
    detail: str = ""
    implementation: str = ""  # IMPLEMENTATIONS' value: which code ran

    @property
    def verdict(self) -> str:
        return verdict_word(self.passed, self.expect_pass)

    @property
    def ok(self) -> bool:
        return self.passed == self.expect_pass

    def to_json(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict
        d["failed_tests"] = list(self.failed_tests)
        return d


@dataclass
class VllmCertification:
    rows: list[Row] = field(default_factory=list)
    version: str = ""
    device: str = ""
    shims: tuple = ()

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)


# -- where vLLM lives --------------------------------------------------------------------------

def checkout_root() -> str:
    """The folder holding pyproject.toml above this package (a source checkout), or ''."""
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (os.path.join(here, "..", ".."), os.path.join(here, "..", "..", "..")):
        up = os.path.normpath(up)
        if os.path.exists(os.path.join(up, "pyproject.toml")):
            return up
    return ""


def locate_python() -> str | None:
    """The interpreter of the vLLM environment: ``$SPECTR_GBV_VLLM_PYTHON``, else
    ``<checkout>/.venv-vllm/bin/python`` when it exists; None otherwise."""
    env = os.environ.get("SPECTR_GBV_VLLM_PYTHON")
    if env:
        return env if os.path.exists(env) else None
    root = checkout_root()
    path = os.path.join(root, ".venv-vllm", "bin", "python") if root else ""
    return path if path and os.path.exists(path) else None


def importable_here() -> bool:
    """True when vLLM can be found by this interpreter (not imported: importing it before the
    shims are enabled would switch its Triton off)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


# -- the run -----------------------------------------------------------------------------------

def plan(samplers=SAMPLERS, families=None) -> list[tuple[Sampler, str]]:
    """(sampler, family) jobs: every family for the samplers expected to pass, the
    ``SYNTHETIC_FAMILIES`` for the synthetic ones."""
    jobs = []
    for s in samplers:
        fams = families or (SYNTHETIC_FAMILIES if s.synthetic else families_for(s.rule))
        jobs += [(s, f) for f in fams]
    return jobs


def families_for(rule: str) -> tuple[str, ...]:
    """The public families (``oracle.certify_cases.FAMILIES``) that have a case for ``rule`` at
    K = 1 (vLLM's samplers take one draft): "branches" needs K ≥ 2, "coverage" and
    "distinctive" need the rule's ``coverage_seeds`` / ``distinctive_seeds``."""
    from spectr_gbv.oracle.certify_cases import FAMILIES
    from spectr_gbv.reference.rules import registry

    spec = registry.spec(rule)
    # "vocab": V = 151,936 rows per request, beyond Triton's interpreter on a CPU (and not yet
    # run on a GPU here); the samplers' draws at a real vocabulary are not certified by this plan
    drop = {"branches", "vocab"}
    if spec.coverage_seeds is None:
        drop.add("coverage")
    if spec.distinctive_seeds is None:
        drop.add("distinctive")
    return tuple(f for f in FAMILIES if f not in drop)


def implementation(native: bool) -> str:
    """Which code a sampler runs in this process (``IMPLEMENTATIONS``)."""
    from spectr_gbv.gpu_backend.adapters import vllm_shims

    if native:
        return IMPLEMENTATIONS["native-cpu"]
    return IMPLEMENTATIONS["interpreted" if vllm_shims.needs_interpreter() else "cuda"]


def _worker_init(native: bool = False) -> None:
    """Make vLLM's samplers runnable in this (spawned) process: the interpreter shims, or
    vLLM's C++ CPU kernels (``native``).  A process serves one of the two."""
    from spectr_gbv.gpu_backend.adapters import vllm_shims

    ok, why = vllm_shims.use_native_cpu_kernels() if native else vllm_shims.available()
    if not ok:
        raise RuntimeError(why)
    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning)  # log(0) = -inf inside interpreted kernels


def run_job(sampler: Sampler, family: str, n_samples: int, alpha: float, seed: int) -> Row:
    """Certify one (sampler, family) case; a raised error becomes a failed row with its message."""
    from spectr_gbv.oracle.harness import certify_verifier

    _worker_init(sampler.native)
    start = time.perf_counter()
    impl = implementation(sampler.native)
    try:
        # the row records the case's tests only: the input probes (oracle/input_probes.py) are not
        # run per case here (not yet run on vLLM's samplers; docs/guarantees.md)
        report = certify_verifier(sampler.build(), sampler.rule, K=1, L=L, families=(family,),
                                  one_hot_drafts=sampler.one_hot, n_samples=n_samples, alpha=alpha, seed=seed,
                                  chunk=256, input_checks=False)
        r = report.results[0]
        failed = tuple(r.failed_tests)
        return Row(sampler.label, sampler.rule, family, sampler.expect_pass, r.passed, r.n, alpha,
                   r.detectable_tv, r.empirical_tv, r.case_pvalue, failed, time.perf_counter() - start,
                   implementation=impl)
    except Exception as err:  # a crash is a failure, reported with its message
        return Row(sampler.label, sampler.rule, family, sampler.expect_pass, False, 0, alpha, math.nan, math.nan,
                   math.nan, ("error",), time.perf_counter() - start, f"{type(err).__name__}: {err}", impl)


def layout_batch_checks(fn, n_seeds: int = 20) -> tuple[int, int]:
    """(seeds whose replay was identical, seeds whose every request gave its batch output again
    when re-run alone and inside a permuted batch of another size), out of ``n_seeds``, for a
    function ``fn`` of vLLM's layout (gpu_backend/adapters/vllm_layout.py) on a ragged batch:
    num_draft_tokens [3, 0, 2, 1], temperatures [1, 0.7, 0, 1.3] (one greedy), V = 50, request b
    seeded 100·s + b.  Alone: request 0 (3 drafts, T = 1) in a batch of one.  Permuted: the four
    requests in the order 2, 0, 3, 1 followed by a fifth (a copy of request 0 with another seed),
    each request's generator seeded as before; every request's row must equal its row in the
    first batch (the seed contract's "batch independence", oracle/seed_contract.py, in the
    layout's own terms)."""
    import numpy as np
    import torch

    from spectr_gbv.gpu_backend.adapters.vllm_layout import generators_from_seeds

    rng = np.random.default_rng(5)
    V, counts = 50, [3, 0, 2, 1]
    n = sum(counts)
    ids = torch.tensor(rng.integers(0, V, n))
    dp = torch.softmax(torch.tensor(rng.normal(size=(n, V)) * 2), -1)
    logits = torch.tensor(rng.normal(size=(n + len(counts), V)) * 2)
    temps = torch.tensor([1.0, 0.7, 0.0, 1.3])
    starts = np.cumsum([0] + counts)[:-1]
    rows_at = np.cumsum([0] + [c + 1 for c in counts])[:-1]

    def request(b: int):
        return (counts[b], ids[starts[b]:starts[b] + counts[b]], dp[starts[b]:starts[b] + counts[b]],
                logits[rows_at[b]:rows_at[b] + counts[b] + 1], temps[b])

    def call(parts, seeds):
        return fn([c for c, *_ in parts], torch.cat([x[1] for x in parts]), torch.cat([x[2] for x in parts]),
                  torch.cat([x[3] for x in parts]), torch.stack([x[4] for x in parts]),
                  generators=generators_from_seeds(np.asarray(seeds)))

    order = [2, 0, 3, 1]
    same = independent = 0
    for s in range(n_seeds):
        seeds = np.arange(4) + 100 * s
        a = call([request(b) for b in range(4)], seeds)
        b_ = call([request(b) for b in range(4)], seeds)
        same += bool(torch.equal(a, b_))
        alone = call([request(0)], seeds[:1])
        permuted = call([request(b) for b in order] + [request(0)], list(seeds[order]) + [100 * s + 99])
        ok = torch.equal(alone[0, :counts[0] + 1], a[0, :counts[0] + 1])
        for pos, b in enumerate(order):
            w = counts[b] + 1
            ok = ok and torch.equal(permuted[pos, :w], a[b, :w]) and bool((permuted[pos, w:] == -1).all())
        independent += bool(ok)
    return same, independent


def replay_checks(sampler: Sampler) -> list[Row]:
    """Two deterministic checks of one sampler on a ragged batch (``layout_batch_checks``, 20
    seeds): (1) replay: the same per-request generators give the same output twice; (2) batch
    independence: every request gives the same output alone (request 0) and inside a permuted
    batch of another size."""
    from spectr_gbv.gpu_backend.adapters.vllm_samplers import sampler as make

    _worker_init(sampler.native)
    fn = make(sampler.kind, **({"rates": SYNTHETIC_RATES} if sampler.synthetic else {}))
    if sampler.one_hot:
        inner = fn

        def fn(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures, *, generators=None):
            return inner(num_draft_tokens, draft_token_ids, None, target_logits, temperatures, generators=generators)

    n_seeds = 20
    start = time.perf_counter()
    same, independent = layout_batch_checks(fn, n_seeds)
    secs = time.perf_counter() - start
    rows = []
    for name, k in (("replay", same), ("batch independence", independent)):
        rows.append(Row(sampler.label, sampler.rule, name, True, k == n_seeds, n_seeds, 0.0, math.nan,
                        math.nan, math.nan, () if k == n_seeds else (name,), secs / 2,
                        f"{k}/{n_seeds} seeds identical", implementation(sampler.native)))
    return rows


def certify_vllm(n_samples: int = CPU_N, alpha: float = DEFAULT_ALPHA, seed: int = 0, workers: int = 2,
                 samplers=SAMPLERS, families=None, progress=None, native_n: int | None = NATIVE_N) -> VllmCertification:
    """Run the plan in ``workers`` processes (each imports vLLM once); rows in plan order.

    The samplers marked ``native`` (vLLM's C++ CPU kernels) run in processes of their own, with
    ``native_n`` samples per case (None: ``n_samples``); they are skipped where a CUDA GPU is
    visible (vLLM's engine runs its Triton kernels there).

    Raises:
        RuntimeError: vLLM is not importable in this interpreter (``vllm_shims.available``).
    """
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from spectr_gbv.gpu_backend.adapters import vllm_shims

    ok, version = vllm_shims.available()
    if not ok:
        raise RuntimeError(version)
    import torch

    cert = VllmCertification(version=version, shims=tuple(s for s in vllm_shims.SHIMS if s.applied)
                             if vllm_shims.needs_interpreter() else (),
                             device="CPU, Triton interpreter" if vllm_shims.needs_interpreter()
                             else f"CUDA {torch.cuda.get_device_name(0)}, native")
    on_cpu = vllm_shims.needs_interpreter()
    groups = [[s for s in samplers if not s.native], [s for s in samplers if s.native and on_cpu]]
    offset = 0  # job j of the whole plan gets seed + 7919·j
    for group in groups:
        if not group:
            continue
        native = group[0].native
        n = (native_n or n_samples) if native else n_samples
        jobs = plan(group, families)
        kinds = {}
        for s in group:
            kinds.setdefault((s.kind, s.one_hot), s)
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(run_job, s, f, n, alpha, seed + 7919 * (offset + j)) for j, (s, f) in enumerate(jobs)]
            offset += len(jobs)
            futures += [pool.submit(replay_checks, s) for s in kinds.values()]
            for fut in futures:
                got = fut.result()
                for row in got if isinstance(got, list) else [got]:
                    cert.rows.append(row)
                    if progress is not None:
                        progress(row)
    return cert


# -- report ------------------------------------------------------------------------------------

def _num(x: float, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| sampler | code that ran | claims | case family | verdict | N | detectable δ | measured TV | p | failed test | time |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        failed = ", ".join(r.failed_tests) or "—"
        if r.detail:
            failed = f"{failed} ({r.detail})" if r.failed_tests else r.detail
        lines.append(f"| {r.sampler} | {r.implementation or '—'} | `{r.rule}` | {r.family} | {r.verdict} | {r.n:,} | "
                     f"{_num(r.detectable_delta, '.3f')} | {_num(r.measured_tv, '.3f')} | {_num(r.pvalue, '.2g')} | "
                     f"{failed} | {r.seconds:.0f} s |")
    return "\n".join(lines)


def rows_from_json(obj: dict) -> list[Row]:
    """The rows of a ``certify samplers vllm --json`` file, back as ``Row`` objects."""
    keep = set(Row.__dataclass_fields__)
    return [Row(**{k: (tuple(v) if k == "failed_tests" else v) for k, v in r.items() if k in keep})
            for r in obj["rows"]]


def pivot_markdown(rows: list[Row]) -> str:
    """README's compact table: one line per sampler, one column per case family, each cell
    "verdict (δ detectable, TV measured)"; replay and batch independence as ✓/✗; N and the
    sampler's total time in its own columns."""
    from spectr_gbv.oracle.certify_cases import FAMILIES

    order, by = [], {}
    for r in rows:
        if r.sampler not in by:
            order.append(r.sampler)
            by[r.sampler] = {}
        by[r.sampler][r.family] = r
    checks = ("replay", "batch independence")
    FAMILIES = tuple(f for f in FAMILIES if any(f in cells for cells in by.values()))  # the run's families
    lines = ["| sampler | claims | " + " | ".join(FAMILIES) + " | seeded replay, batch independence | N | time (its cases summed) |",
             "|---|---|" + "---|" * len(FAMILIES) + "---|---|---|"]
    for name in order:
        cells = by[name]
        first = next(iter(cells.values()))
        fam = []
        for f in FAMILIES:
            r = cells.get(f)
            fam.append("—" if r is None else f"{r.verdict} (δ {_num(r.detectable_delta, '.2f')}, TV {_num(r.measured_tv, '.3f')})")
        rep = " ".join("✓" if cells[c].passed else "✗" for c in checks if c in cells) or "—"
        n = max((r.n for f, r in cells.items() if f not in checks), default=0)
        secs = sum(r.seconds for r in cells.values())
        lines.append(f"| {name} | `{first.rule}` | " + " | ".join(fam) + f" | {rep} | {n:,} | {secs / 60:.0f} min |")
    return "\n".join(lines)


def summary(cert: VllmCertification) -> str:
    certified = sum(r.ok and r.expect_pass for r in cert.rows)
    caught = sum(r.ok and not r.expect_pass for r in cert.rows)
    bad = [r for r in cert.rows if not r.ok]
    head = (f"vLLM {cert.version} ({cert.device}): {certified} rows certified, {caught} lossy rows caught, "
            f"{len(bad)} not as expected")
    return head + ("" if not bad else ": " + "; ".join(f"{r.sampler} / {r.family}: {r.verdict}" for r in bad))


def markdown(cert: VllmCertification, command: str) -> str:
    n = max((r.n for r in cert.rows if r.family not in ("replay", "batch independence")), default=0)
    lines = [f"`{command}`", "", f"vLLM {cert.version}; {cert.device}; N = {n:,} per case, α = "
             f"{cert.rows[0].alpha if cert.rows else DEFAULT_ALPHA:g} per case, K = 1, L = {L}; synthetic rates "
             f"{list(SYNTHETIC_RATES)} (unconditional, per depth).", "", markdown_table(cert.rows), "",
             f"**{summary(cert)}**"]
    if cert.shims:
        lines += ["", "Shims applied on our side (gpu_backend/adapters/vllm_shims.py); every other kernel line "
                  "ran as shipped, interpreted:", ""]
        lines += [f"- {s.name}: {s.where} — {s.what}" for s in cert.shims]
    return "\n".join(lines)


def run_elsewhere(python: str, argv: list[str]) -> int:
    """Run ``python -m spectr_gbv <argv>`` (the vLLM environment's interpreter), streaming its
    output; its exit status."""
    import subprocess

    env = dict(os.environ)
    root = checkout_root()
    if root:
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    print(f"certify samplers vllm: running in the vLLM environment ({python})", file=sys.stderr, flush=True)
    return subprocess.call([python, "-m", "spectr_gbv", *argv], env=env)
