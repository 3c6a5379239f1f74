"""What the benchmark runs: its methods, its configuration and the settings (points) a
configuration asks for.

Methods: ``ar`` (plain sampling, the speedup reference), the rules ``sd``, ``spectr``, ``bv``,
``gbv``, ``spectr_gbv`` (as released), ``kseq_gbv``, the non-modifying multi-draft rules
``kseq_bv`` and ``traversal`` (and any other verifier name, e.g. ``mdbv``, left out of the
default list because its host-side plan costs seconds per iteration at V = 151,936), and
``hf_assisted``.  Single-draft rules, ``ar`` and ``hf_assisted`` run at K = 1 only.

How the settings are measured: ``gpu_backend.bench.run``; the tables and plots:
``gpu_backend.bench.render``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spectr_gbv.reference.rules import registry

from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L

SWEEPS = ("none", "K", "L", "T")
SWEEP_VALUES = {"K": (1, 2, 3, 4, 5, 6, 7), "L": tuple(range(2, 13)), "T": (0.1, 0.4, 0.7)}


def default_methods() -> tuple[str, ...]:
    """The benchmark's default methods: our AR, every registered rule marked ``bench`` (the
    registry, in its order), and transformers' assisted generation."""
    return ("ar",) + registry.names(bench=True) + ("hf_assisted",)


def runs_at_K1(method: str) -> bool:
    """Methods that run at K = 1 whatever the K asked for: AR, assisted generation and the
    single-draft rules."""
    return method in ("ar", "hf_assisted") or (method in registry.names() and registry.is_single_draft(method))


@dataclass
class BenchConfig:
    """What to run.  Defaults: the Qwen2.5-Coder pair in bfloat16, HumanEval, 64 new tokens,
    T = 0.7, the engine's default K and L.

    Raises (``check``):
        ValueError: unknown method or sweep, K/L/prompts/max_new_tokens < 1, bad sampling values.
    """

    methods: tuple = field(default_factory=default_methods)
    dataset: str = "humaneval"
    prompts: int = 10
    max_new_tokens: int = 64
    K: int = DEFAULT_K
    L: int = DEFAULT_L
    temperature: float = 0.7
    top_k: int | None = None
    top_p: float | None = None
    sweeps: tuple = ("none",)
    K_values: tuple = SWEEP_VALUES["K"]
    L_values: tuple = SWEEP_VALUES["L"]
    T_values: tuple = SWEEP_VALUES["T"]
    target: str = "target"
    draft: str = "draft"
    dtype: str = "bfloat16"
    seed: int = 0
    chat: bool = True
    warmup: bool = True
    # settings that only a sweep asks for run on the first ``sweep_prompts`` prompts (None:
    # all); the main point always runs on every prompt
    sweep_prompts: int | None = None

    def check(self) -> None:
        from spectr_gbv.gpu_backend.engine.inputs import check_positive

        for name in ("prompts", "max_new_tokens", "K", "L"):
            check_positive(getattr(self, name), name)
        if self.sweep_prompts is not None:
            check_positive(self.sweep_prompts, "sweep_prompts")
        for k in self.K_values:
            check_positive(k, "K")
        for v in self.L_values:
            check_positive(v, "L")
        from spectr_gbv.gpu_backend.decoding.temperature import check_temperature

        for t in (self.temperature, *self.T_values):
            # the benchmark samples (its CLI refuses --temperature 0 too): greedy is not a point
            check_temperature(t, "temperature", greedy_ok=False)
            self.sampling(t)
        bad = [s for s in self.sweeps if s not in SWEEPS]
        if bad:
            raise ValueError(f"sweep must be among {SWEEPS}, got {bad}")
        if "ar" not in self.methods:
            raise ValueError("methods must include 'ar' (the speedup ratio's reference)")

    def sampling(self, temperature: float):
        """``sampling.SamplingConfig`` at ``temperature`` with this config's top-k and top-p."""
        from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

        return SamplingConfig(temperature, self.top_k, self.top_p)


@dataclass(frozen=True)
class Setting:
    """One point to measure: a method with its K, L and temperature (AR: K = 1, L = 0)."""

    method: str
    K: int
    L: int
    temperature: float


def settings(config: BenchConfig) -> dict[Setting, set[str]]:
    """Every setting to run, with the sweeps it belongs to (shared points run once)."""
    out: dict[Setting, set[str]] = {}

    def add(method, K, L, T, sweep):
        if method == "ar":
            K, L = 1, 0
        elif runs_at_K1(method):
            K = 1
        out.setdefault(Setting(method, K, L, T), set()).add(sweep)

    for sweep in config.sweeps:
        if sweep == "none":
            for m in config.methods:
                add(m, config.K, config.L, config.temperature, sweep)
        elif sweep == "K":
            for k in config.K_values:
                for m in config.methods:
                    add(m, k, config.L, config.temperature, sweep)
        elif sweep == "L":
            for v in config.L_values:
                for m in config.methods:
                    add(m, config.K, v, config.temperature, sweep)
        elif sweep == "T":
            for t in config.T_values:
                for m in config.methods:
                    add(m, config.K, config.L, t, sweep)
    return out
