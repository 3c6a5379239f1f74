"""The one rule registry (reference.rules.registry): every list of rules derives from it, the
torch verifiers agree with it, and a rule added by one registration reaches the claims' tables,
the certification plan, the benchmark's method set and the CLI without touching other files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spectr_gbv.cli import main as cli_main
from spectr_gbv.gpu_backend.bench import config as bench_config
from spectr_gbv.gpu_backend.certify import verifiers as certification
from spectr_gbv.gpu_backend.certify.suite import suite_verifier
from spectr_gbv.gpu_backend.verifiers import get_verifier
from spectr_gbv.gpu_backend.verifiers.bv import BlockVerification as TorchBV
from spectr_gbv.oracle.certify import certify_case
from spectr_gbv.proofs_check import claims
from spectr_gbv.proofs_check import tables
from spectr_gbv.proofs_check.runner import run_claim
from spectr_gbv.reference.rules import RULES, get_rule, registry
from spectr_gbv.reference.rules.bv import BlockVerification as RefBV

NAME = "throwaway_bv"


class ThrowawayRef(RefBV):
    name = NAME


class ThrowawayTorch(TorchBV):
    name = NAME


@pytest.fixture
def throwaway():
    registry.register(registry.RuleSpec(
        NAME, ThrowawayRef, ThrowawayTorch, single_draft=True, lossless=True, modifies_targets=False,
        citation="a test", summary="BV under another name"))
    yield NAME
    registry.unregister(NAME)


def test_builtin_registry_facts():
    assert registry.names() == ("sd", "spectr", "bv", "gbv", "spectr_gbv", "spectr_gbv_fixed", "kseq_gbv",
                                "kseq_bv", "traversal", "mdbv", "mdbv_kseq")
    assert registry.names(lossless=True) == ("sd", "spectr", "bv", "gbv", "kseq_gbv", "kseq_bv", "traversal",
                                             "mdbv", "mdbv_kseq")
    assert registry.names(single_draft=True) == ("sd", "bv", "gbv")
    assert registry.names(modifies_targets=True) == ("gbv", "spectr_gbv_fixed", "kseq_gbv")
    assert bench_config.default_methods() == ("ar", "sd", "spectr", "bv", "gbv", "spectr_gbv", "kseq_gbv", "kseq_bv",
                                       "traversal", "mdbv_kseq", "hf_assisted")


@pytest.mark.parametrize("name", registry.names())
def test_both_backends_agree_with_the_registry(name):
    s = registry.spec(name)
    ref, port = get_rule(name), get_verifier(name)
    assert (ref.single_draft, ref.modifies_targets) == (s.single_draft, s.modifies_targets)
    assert (port.single_draft, port.modifies_targets) == (s.single_draft, s.modifies_targets)


def test_registration_is_checked():
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.spec("bv"))
    with pytest.raises(ValueError, match="single_draft=False"):
        registry.register(registry.RuleSpec("x", RefBV, TorchBV, single_draft=False, lossless=True,
                                            modifies_targets=False, citation="", summary=""))
    with pytest.raises(ValueError, match="unknown rule 'nope'; known rules: sd, spectr"):
        registry.spec("nope")


def test_a_registered_rule_reaches_every_list(throwaway):
    assert NAME in RULES and isinstance(get_rule(NAME), ThrowawayRef)
    assert isinstance(get_verifier(NAME), ThrowawayTorch)
    assert NAME in tables.lossless_rules() and NAME not in tables.multi_rules()
    assert NAME in bench_config.default_methods() and bench_config.runs_at_K1(NAME)
    config = bench_config.BenchConfig(methods=("ar", NAME), K=3, L=2, sweeps=("none",))
    assert all(s.K == 1 for s in bench_config.settings(config))
    kinds = {(e.kind, e.size) for e in certification.plan([NAME], quick=True)}
    assert {("lossless", "toy"), ("lossless", "rows"), ("lossless", "law")} <= kinds
    assert NAME in registry.help_text()


def test_a_registered_rule_is_proved_certified_and_run_by_the_cli(throwaway, tmp_path, capsys):
    """Its losslessness claim holds (exact engine), its torch port passes the certification of
    its toy case (N = 20,000, alpha = 1e-6), and ``spectr-gbv exact --rule`` runs it."""
    result = run_claim(claims.lossless_claim("x", NAME, "throwaway is lossless", "test", Ks=(1,)), "quick")
    assert result.verdict == "holds" and result.worst_deviation <= 1e-12
    toy = next(e for e in certification.plan([NAME], quick=True) if e.size == "toy").build()[0]
    r = certify_case(suite_verifier(toy.rule, torch.float32), toy, 20_000, 1e-6, 4096)
    assert r.verdict == "PASS", r
    code = cli_main.main(["exact", "--rule", NAME, "--K", "1", "--L", "2", "--json",
                                "--draft", "examples/toy_draft.json", "--target", "examples/toy_target.json"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)["rule"] == NAME
    # BV's exact E[τ] on the toy at L = 2 is 11/9
    assert np.isclose(json.loads(out)["expected_accepted"], 11 / 9, atol=1e-12)
