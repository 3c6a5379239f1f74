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
from spectr_gbv.certify.verifiers import run as certification
from spectr_gbv.certify.suite import suite_verifier
from spectr_gbv.gpu_backend.verifiers import get_verifier
from spectr_gbv.certify.planted import FirstFailureBV
from spectr_gbv.gpu_backend.verifiers.bv import BlockVerification as TorchBV
from spectr_gbv.oracle.certify import certify_case
from spectr_gbv.proofs_check import claims
from spectr_gbv.proofs_check import tables
from spectr_gbv.proofs_check.runner import run_claim
from spectr_gbv.reference.rules import RULES, get_rule, registry
from spectr_gbv.reference.rules.base import Rule, draw_residual
from spectr_gbv.reference.rules.bv import BlockVerification as RefBV
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import gather_rows, make_verdict

NAME = "throwaway_bv"


class ThrowawayRef(RefBV):
    name = NAME


class ThrowawayTorch(TorchBV):
    reference = ThrowawayRef  # name and flags read from it; defining it makes it the rule's torch verifier


class ThrowawayFirstFailure(FirstFailureBV):
    planted_as = "planted_throwaway_first_failure"  # defining it makes it the planted defect's class


@pytest.fixture
def throwaway():
    registry.register(registry.RuleSpec(
        NAME, ThrowawayRef, lossless=True, citation="a test", summary="BV under another name",
        planted=(registry.Planted("planted_throwaway_first_failure", "BV's first-failure defect", 1, 3, 3, 9, 2),)))
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
    # the flags are the reference rule's: a spec cannot restate (or contradict) them
    with pytest.raises(TypeError, match="single_draft"):
        registry.RuleSpec("x", RefBV, single_draft=False, lossless=True, citation="", summary="")
    assert registry.RuleSpec("x", RefBV, lossless=True, citation="", summary="").single_draft is True
    with pytest.raises(ValueError, match="planted defect name 'planted_bv_shared_uniform' is empty or taken"):
        registry.register(registry.RuleSpec("x", RefBV, lossless=True, citation="", summary="",
                                            planted=registry.spec("bv").planted))
    assert "x" not in registry.names()
    # a rule whose numpy class no torch verifier ports has none (gpu_backend.verifiers.verifier_class)
    from spectr_gbv.certify.planted import planted_verifier
    from spectr_gbv.gpu_backend.verifiers import verifier_class

    class Unported(RefBV):
        name = "unported"

    with pytest.raises(ValueError, match="rule 'unported' has no torch verifier: define .* reference = "):
        verifier_class(registry.RuleSpec("unported", Unported, lossless=True, citation="", summary=""))
    assert verifier_class(registry.spec("bv")) is TorchBV  # a later subclass does not replace it
    assert type(planted_verifier("planted_bv_first_failure")) is FirstFailureBV
    with pytest.raises(ValueError, match="planted defect 'nope' has no torch class"):
        planted_verifier("nope")
    with pytest.raises(ValueError, match="already has the class FirstFailureBV"):
        type("Again", (FirstFailureBV,), {"planted_as": "planted_bv_first_failure"})
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


def test_every_rule_has_a_planted_defect_and_its_certification_data():
    """Every registered rule has at least one planted defect (a negative control certify must
    catch), whose base is the rule, and the distinctive rules are the non-modifying multi-draft
    tree rules."""
    for s in registry.specs():
        assert s.planted and all(p.base == s.name for p in s.planted), s.name
    assert len(registry.planted()) == sum(len(s.planted) for s in registry.specs())
    assert tuple(s.name for s in registry.specs() if s.distinctive_seeds) == ("kseq_bv", "traversal", "mdbv",
                                                                              "mdbv_kseq")
    assert registry.engine_skipped() == {"mdbv": registry.spec("mdbv").engine_skip}
    assert registry.spec("spectr").rows_L == 1


# -- a rule with a new algorithm, registered in one call -------------------------------------------

FRESH = "throwaway_fresh_draw"


class FreshDrawRef(Rule):
    """Accept the first draft token iff it equals a fresh target draw Y ~ q(· | c) (probability
    q(X_1): coin (0, 1)), then emit a fresh draw from q(· | c, X_1); else emit Y, which given
    Y ≠ X_1 is ∝ q with X_1 removed.  Lossless: P(first = x) = p(x)q(x) + q(x)(1 − p(x)) = q(x).
    τ ≤ 1."""

    name = FRESH
    single_draft = True

    def decide(self, block, source):
        x = int(block.tokens[0, 0])
        if source.coin(block.tp[0, 0, x], (0, 1)):
            return Verdict(1, 0, (x, source.draw(block.tp[0, 1])))
        weights = block.tp[0, 0].copy()
        weights[x] = 0.0
        return Verdict(0, -1, (draw_residual(source, weights, block.tp[0, 0]),))


class FreshDrawTorch(Verifier):
    reference = FreshDrawRef

    def decide(self, batch, noise):
        x = batch.tokens[:, 0, 0]
        accept = noise.uniforms[:, 0, 1] <= batch.q_step[:, 0, 0]
        tau = accept.long()
        row = torch.zeros_like(tau)
        q_row = gather_rows(batch.tp, row, tau)
        weights = q_row.clone()
        b = torch.arange(batch.B, device=batch.device)
        weights[b, x] = torch.where(accept, weights[b, x], torch.zeros_like(weights[b, x]))
        last = noise.draw(weights, q_row)
        return make_verdict(batch, tau, torch.where(accept, row, torch.full_like(row, -1)), row, last)


class FreshDrawKeepsX(FreshDrawTorch):
    """Planted: on rejection the draw keeps X_1 (∝ q instead of q without X_1)."""

    name = "planted_fresh_draw_keeps_x"
    planted_as = "planted_fresh_draw_keeps_x"

    def decide(self, batch, noise):
        x = batch.tokens[:, 0, 0]
        accept = noise.uniforms[:, 0, 1] <= batch.q_step[:, 0, 0]
        tau = accept.long()
        row = torch.zeros_like(tau)
        q_row = gather_rows(batch.tp, row, tau)
        last = noise.draw(q_row, q_row)
        return make_verdict(batch, tau, torch.where(accept, row, torch.full_like(row, -1)), row, last)


@pytest.mark.long
def test_a_new_algorithm_registered_in_one_call_is_listed_certified_and_its_defect_caught():
    """A rule that is no subclass of a registered one (numpy reference, torch verifier, planted
    defect): one register call puts it in every derived list, the certification machinery
    certifies it lossless (toy, V = 4,096 rows and the target law, N = 20,000) and catches its
    planted defect; unregistered at the end."""
    registry.register(registry.RuleSpec(
        FRESH, FreshDrawRef, lossless=True, citation="a test",
        summary="accept iff the draft equals a fresh target draw",
        planted=(registry.Planted("planted_fresh_draw_keeps_x", "rejection draw keeps the draft token",
                                  1, 2, 3, 9, 2),)))
    try:
        spec = registry.spec(FRESH)
        assert spec.single_draft and not spec.modifies_targets
        assert FRESH in registry.names(lossless=True, single_draft=True, modifies_targets=False)
        assert FRESH in RULES and isinstance(get_rule(FRESH), FreshDrawRef)
        port = get_verifier(FRESH)
        assert isinstance(port, FreshDrawTorch) and port.name == FRESH and port.single_draft
        assert FRESH in tables.lossless_rules() and FRESH in bench_config.default_methods()
        assert FRESH in registry.help_text() and "planted_fresh_draw_keeps_x" in registry.planted()
        from spectr_gbv.certify.our_engine.certificate import engine_rules, planted_for

        assert FRESH in engine_rules() and planted_for([FRESH]) == ()  # not measured on the engine
        entries = certification.plan([FRESH], quick=True)
        assert {(e.kind, e.size) for e in entries} == {("lossless", "toy"), ("lossless", "rows"),
                                                       ("lossless", "law"), ("planted", "planted")}
        cert = certification.certify_rules([FRESH], quick=True, n_samples=20_000)
        verdicts = {(r.rule, r.case): r.verdict for r in cert.rows}
        assert cert.ok, verdicts
        assert [r.verdict for r in cert.rows if r.kind == "lossless"] == ["PASS"] * 4, verdicts
        planted = [r for r in cert.rows if r.kind == "planted"]
        assert [(r.rule, r.verdict) for r in planted] == [("planted_fresh_draw_keeps_x", "CAUGHT")]
        assert planted[0].pvalue < 1e-12
        # the exact engine proves it lossless
        result = run_claim(claims.lossless_claim("x", FRESH, "fresh draw is lossless", "test", Ks=(1,)), "quick")
        assert result.verdict == "holds" and result.worst_deviation <= 1e-12
    finally:
        registry.unregister(FRESH)
    assert FRESH not in registry.names() and "planted_fresh_draw_keeps_x" not in registry.planted()
