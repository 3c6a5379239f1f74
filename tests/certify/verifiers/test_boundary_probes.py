"""oracle.harness.boundary_probes: deterministic probes at u = 2^-53 and u = 1 (zero target mass
on the drafted tokens, p = q, toy rows) and NaN rows, for every registered rule's torch verifier
and reference rule; a verifier with the wrong coin convention and one that does not refuse NaN
rows fail them; a verifier without ``noise=`` is refused with a TypeError."""

from __future__ import annotations

import pytest

from spectr_gbv.gpu_backend.adapters.transformers_sd import TransformersSpeculativeSampling
from spectr_gbv.gpu_backend.verifiers import get_verifier
from spectr_gbv.oracle.harness import INPUT_PROBES, PROBES, boundary_probes
from spectr_gbv.reference.rules import RULES, registry
from helpers.verifier_cases import one_torch_thread  # noqa: F401,E402  (autouse fixture)


@pytest.mark.parametrize("name", registry.names())
def test_every_rule_passes_the_probes(name):
    for verifier in (get_verifier(name), RULES[name]):
        probes = boundary_probes(verifier, name)
        assert len(probes) == len(PROBES) + len(INPUT_PROBES)
        assert all(p.passed for p in probes), [(p.name, p.detail) for p in probes if not p.passed]


class FlippedCoins:
    """The torch sd verifier fed 1 − u + 2^-53: a coin convention u ≥ 1 − h instead of u ≤ h
    (the same law under uniform u, but not the MatchedSource convention the probes pin)."""

    def __init__(self):
        self.inner = get_verifier("sd")

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None):
        if noise is not None:
            noise = (1.0 - noise[0] + 2.0**-53, noise[1])
        return self.inner(draft_tokens, draft_probs, target_probs, seeds=seeds, noise=noise)


class NoChecks:
    """The torch sd verifier with its value checks off: NaN rows go through."""

    def __init__(self):
        self.inner = get_verifier("sd")

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None):
        return self.inner(draft_tokens, draft_probs, target_probs, seeds=seeds, noise=noise, validate=False)


def test_wrong_convention_and_missing_checks_fail():
    failed = [p.name for p in boundary_probes(FlippedCoins(), "sd") if not p.passed]
    # the zeros rows reach depth L − 1 (oracle.certify_cases._zero_target_mass): coins there see the convention too
    assert failed == ["zeros rows, every uniform = 1.11022e-16", "zeros rows, every uniform = 1",
                      "toy rows, every uniform = 1.11022e-16", "toy rows, every uniform = 1"]
    unchecked = {p.name: p for p in boundary_probes(NoChecks(), "sd")}
    assert not unchecked["NaN in target_probs"].passed
    assert "instead of raising ValueError" in unchecked["NaN in target_probs"].detail


def test_verifier_without_noise_is_refused():
    with pytest.raises(TypeError, match="does not take noise="):
        boundary_probes(TransformersSpeculativeSampling(), "sd")
