"""The third-party verifiers this project certifies, and their certificate for the report.

Each entry names an adapter (a verifier with the batched contract of reference/contract.py),
the registered rule whose exact law it claims, and whether it should pass (a lossy setting is
listed to show that the certificate catches it).  ``certify_all`` runs the public harness
(oracle.harness.certify_verifier) on every entry; ``markdown`` renders the table that
``spectr-gbv report`` embeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from spectr_gbv.oracle.certify_cases import FAMILIES
from spectr_gbv.oracle.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES


@dataclass(frozen=True)
class ThirdParty:
    """One certified third-party verifier.

    Attributes:
        name: label.  description: what it is and where it lives.
        factory: zero-argument constructor of the adapter.
        rule: registered rule whose exact law it is tested against.  K, L: sizes of the cases.
        expect_pass: False for a setting that is lossy by design (the certificate must catch it).
        input_checks: run the input probes (oracle.input_probes: impossible rows must raise
            ValueError).  False for transformers, which takes logits from a model: its adapter
            turns the contract's rows into log-probabilities, so a row the contract refuses
            reaches it as logits it cannot tell from a model's (the report says so: not seen).
    """

    name: str
    description: str
    factory: Callable[[], object]
    rule: str
    K: int = 1
    L: int = 3
    expect_pass: bool = True
    input_checks: bool = True


def _transformers(weight=None):
    from spectr_gbv.gpu_backend.adapters.transformers_sd import TransformersSpeculativeSampling

    return lambda: TransformersSpeculativeSampling(weight)


def _vllm_layout(rule: str):
    from spectr_gbv.gpu_backend.adapters.vllm_adapter import from_vllm_layout
    from spectr_gbv.gpu_backend.adapters.vllm_rules import rules_in_vllm_layout

    return lambda: from_vllm_layout(rules_in_vllm_layout(rule))


THIRD_PARTY: list[ThirdParty] = [
    ThirdParty("transformers _speculative_sampling",
               "assisted generation's verifier at its defaults (transformers.generation.utils)",
               _transformers(), "sd", input_checks=False),
    ThirdParty("transformers _speculative_sampling, assistant_ensemble_weight=0.5",
               "the relaxed acceptance v = w·q_draft + (1 − w)·p_target: lossy by design",
               _transformers(0.5), "sd", expect_pass=False, input_checks=False),
    ThirdParty("vLLM v1 rejection-sampler layout, our bv",
               "our bv run in vLLM v1's flattened layout and read back (gpu_backend/adapters/vllm_rules.py): "
               "the layout's row order, bonus rows and padding, per-request temperatures and filler requests (greedy, "
               "0-draft, ragged)", _vllm_layout("bv"), "bv"),
]


def certify_all(n_samples: int = DEFAULT_SAMPLES, alpha: float = DEFAULT_ALPHA, families=FAMILIES, entries=None,
                progress=None) -> list[tuple[ThirdParty, object]]:
    """(entry, CertificationReport) for every entry (default ``THIRD_PARTY``).

    Raises:
        ValueError: bad n_samples, alpha or families (oracle.harness.certify_verifier).
    """
    from spectr_gbv.oracle.harness import certify_verifier

    out = []
    for entry in entries if entries is not None else THIRD_PARTY:
        report = certify_verifier(entry.factory(), entry.rule, K=entry.K, L=entry.L,
                                  families=families, n_samples=n_samples, alpha=alpha,
                                  progress=progress, input_checks=entry.input_checks)
        out.append((entry, report))
    return out


def verdict(entry: ThirdParty, report) -> str:
    """CERTIFIED / NOT CERTIFIED for an entry expected to pass; CAUGHT / MISSED otherwise."""
    if entry.expect_pass:
        return "CERTIFIED" if report.ok else "NOT CERTIFIED"
    return "CAUGHT" if not report.ok else "MISSED"


def ok(results) -> bool:
    """Every entry as expected (certified, or caught when lossy by design)."""
    return all(verdict(e, r) in ("CERTIFIED", "CAUGHT") for e, r in results)


def markdown(results) -> str:
    """One row per entry: law, cases passed, largest measured TV, smallest detectable δ, verdict."""
    lines = ["| verifier | tested against | cases passed | largest measured TV | detectable δ | verdict |",
             "|---|---|---|---|---|---|"]
    for entry, report in results:
        rs = report.results
        passed = sum(r.passed for r in rs)
        worst = max(rs, key=lambda r: r.empirical_tv)
        lines.append(f"| {entry.name} | exact law of `{entry.rule}` (K={entry.K}, L={entry.L}) | "
                     f"{passed}/{len(rs)} | {worst.empirical_tv:.3f} ({worst.name.split()[1]}) | "
                     f"{min(r.detectable_tv for r in rs):.3f}–{max(r.detectable_tv for r in rs):.3f} | "
                     f"{verdict(entry, report)} |")
    n = results[0][1].results[0].n if results and results[0][1].results else 0
    lines += ["", f"N = {n:,} per case, α = {results[0][1].results[0].alpha:g} per case; "
              "families: " + ", ".join(FAMILIES) + " (oracle.certify_cases.case_family).  The measured "
              "TV is ½ Σ |O/N − p| over the outcomes (biased upwards by sampling noise)."] if n else []
    return "\n".join(lines)
