"""gpu_backend.bench.config / bench_run / bench_render / bench_cli / report_cli plumbing on
small random models (no downloads)."""

import json
import math
import re
import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from spectr_gbv.gpu_backend.bench import render as bench_render
from spectr_gbv.gpu_backend.bench.config import SWEEP_VALUES, BenchConfig, Setting, default_methods, settings  # noqa: E402
from spectr_gbv.gpu_backend.bench.run import run_bench  # noqa: E402
from spectr_gbv.gpu_backend.models.pair import ModelPair  # noqa: E402

from helpers.engine_models import PROMPT, perturbed, random_lm  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = random_lm(1)
    yield ModelPair(target, perturbed(target, 2), tokenizer=None, eos=frozenset(), description="random")
    torch.set_num_threads(threads)


def test_settings_share_points_and_keep_single_draft_rules_at_K1():
    config = BenchConfig(methods=("ar", "sd", "kseq_gbv", "hf_assisted"), K=3, L=4,
                         temperature=0.7, sweeps=("none", "K", "T"), K_values=(1, 3),
                         T_values=(0.4, 0.7))
    plan = settings(config)
    assert plan[Setting("kseq_gbv", 3, 4, 0.7)] == {"none", "K", "T"}
    assert Setting("kseq_gbv", 1, 4, 0.7) in plan
    assert plan[Setting("ar", 1, 0, 0.7)] == {"none", "K", "T"}
    assert Setting("ar", 1, 0, 0.4) in plan
    assert all(s.K == 1 for s in plan if s.method in ("ar", "sd", "hf_assisted"))
    # ar K=1 at 0.4 and 0.7; sd, hf at 0.4, 0.7; kseq_gbv at (K=1, 0.7), (3, 0.7), (3, 0.4)
    assert len(plan) == 2 + 2 + 2 + 3


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="sweep"):
        BenchConfig(sweeps=("X",)).check()
    with pytest.raises(ValueError, match="'ar'"):
        BenchConfig(methods=("sd",)).check()
    with pytest.raises(ValueError, match="K must"):
        BenchConfig(K=0).check()
    with pytest.raises(ValueError, match="temperature"):
        BenchConfig(T_values=(0.0,)).check()


def test_run_bench_rows_json_markdown_plots(pair, tmp_path):
    config = BenchConfig(prompts=2, max_new_tokens=10, K=2, L=3, temperature=0.9,
                         sweeps=("none", "K", "L", "T"), K_values=(1, 2), L_values=(2, 3),
                         T_values=(0.6, 0.9), warmup=True, dataset="random")
    result = run_bench(config, pair=pair, prompt_ids=[PROMPT, PROMPT[::-1]], progress=False)
    main = {r["method"]: r for r in result.rows if r["sweep"] == "none"}
    assert set(main) == set(default_methods())
    for r in result.rows:
        for key in ("method", "dataset", "K", "L", "temperature", "block_efficiency",
                    "speedup_ratio", "tokens_per_second", "mean_accepted"):
            assert key in r
        assert r["n_prompts"] == 2 and r["dataset"] == "random"
    assert main["ar"]["speedup_ratio"] == 1.0 and main["ar"]["block_efficiency"] == 1.0
    assert main["ar"]["speedup_ratio_cpu_time"] == 1.0
    kseq_runs = [r for r in result.runs if r["method"] == "kseq_gbv" and r["K"] == 2 and r["L"] == 3
                 and r["temperature"] == 0.9]
    assert main["kseq_gbv"]["block_efficiency_pooled"] == pytest.approx(
        sum(r["new_tokens"] for r in kseq_runs) / sum(r["target_calls"] for r in kseq_runs))
    assert all(r["cpu_time_s"] > 0 for r in result.runs)
    assert all(main[m]["K"] == 1 for m in ("sd", "bv", "gbv", "hf_assisted"))
    assert main["kseq_gbv"]["K"] == 2 and main["kseq_gbv"]["L"] == 3
    for m, row in main.items():  # the median over the prompts of each run's own ratio
        mine = [r for r in result.runs if (r["method"], r["K"], r["L"], r["temperature"])
                == (m, row["K"], row["L"], row["temperature"])]
        assert len(mine) == 2
        assert row["block_efficiency"] == pytest.approx(
            statistics.median(r["new_tokens"] / r["target_calls"] for r in mine))
        # 10 tokens, at most L + 1 per target call (ar: L = 0) and at least 1
        assert all(math.ceil(10 / (row["L"] + 1)) <= r["target_calls"] <= 10 for r in mine), (m, mine)
    # runs: every setting once per prompt; BE and SR of a run follow from its own counts
    assert len(result.runs) == 2 * len(settings(config))
    for run in result.runs:
        assert run["block_efficiency"] == pytest.approx(run["new_tokens"] / run["target_calls"])
        if run["method"] != "ar":  # one definition of mean τ (kept draft tokens) per column
            assert run["mean_accepted"] <= run["block_efficiency"] <= run["mean_accepted"] + 1 + 1e-12
            # Σ τ / Σ drafted positions: the engine's last blocks are capped at the tokens still
            # needed (fewer than L positions); transformers' assisted generation drafts L
            S = run["draft_positions_per_iteration"]
            S = run["L"] if S != S else S
            assert run["acceptance_rate"] == pytest.approx(run["mean_accepted"] / S)
            assert 1 <= S <= run["L"]
    for r in result.rows:  # medians inside their quartiles; lossless from the registry
        assert r["speedup_ratio_q1"] <= r["speedup_ratio"] <= r["speedup_ratio_q3"]
        assert r["block_efficiency_q1"] <= r["block_efficiency"] <= r["block_efficiency_q3"]
        assert r["lossless"] is (r["method"] not in ("spectr_gbv", "spectr_gbv_fixed"))
        assert r["time_to_first_token_s"] > 0
    json.dumps(result.rows)
    text = bench_render.to_markdown(result, "spectr-gbv bench --test")
    lossy = [r["method"] for r in result.rows if not r["lossless"]]
    assert all(f"| {m} (lossy) |" in text for m in lossy)
    assert "| method | K | L | T |" in text and "Sweep over K" in text and "Sweep over T" in text
    paths = bench_render.write_plots(result.rows, str(tmp_path / "plots"))
    paths.append(bench_render.write_bar_plot(result.rows, str(tmp_path / "plots")))
    assert len(paths) == 4
    for path in paths:
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bench_cli_arguments():
    import argparse

    from spectr_gbv.cli import bench as bench_cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    bench_cli.register(sub)
    args = parser.parse_args(["bench", "--sweep", "all", "--K", "3", "1", "5", "--L", "6",
                              "--temperature", "0.4", "--methods", "ar", "kseq_gbv"])
    config = bench_cli.config_from_args(args)
    assert config.sweeps == ("none", "K", "L", "T")
    assert (config.K, config.K_values, config.L, config.temperature) == (3, (3, 1, 5), 6, 0.4)
    assert config.L_values == SWEEP_VALUES["L"]
    assert config.methods == ("ar", "kseq_gbv")
    quick = bench_cli.config_from_args(parser.parse_args(["bench", "--quick", "--sweep", "K"]))
    assert (quick.prompts, quick.max_new_tokens, quick.sweeps) == (2, 32, ("none",))
    with pytest.raises(ValueError, match="top_p"):
        bench_cli.config_from_args(parser.parse_args(["bench", "--top-p", "1.5"]))


def test_report_targets_and_skipped_parts(tmp_path):
    from spectr_gbv.cli import report as report_cli

    rows = {"kseq_gbv": {"speedup_ratio": 1.5, "block_efficiency": 3.0},
            "hf_assisted": {"speedup_ratio": 1.6, "block_efficiency": 2.0},
            "sd": {"block_efficiency": 2.0}, "bv": {"block_efficiency": 2.1}}
    checks = {name: ok for name, _, ok in report_cli.targets(rows, 5.0)}
    assert checks == {"K-SEQ-GBV speedup ratio ≥ 1.4": True,
                      "K-SEQ-GBV speedup ratio ≥ hf_assisted's": False,
                      "block efficiency SD ≤ BV": True, "peak RSS < 8 GB": True}
    from spectr_gbv.cli import main as cli_main

    out = tmp_path / "rep"
    code = cli_main.main(["report", "--out", str(out), "--skip", "prove", "certify", "third_party", "vllm"])
    assert code == 1  # skipped parts are not passed parts
    text = (out / "REPORT.md").read_text()
    assert "NOT PASSED" in text and "| certify | skipped |" in text
    # without --full the long parts are not run, and the report says so in one line
    assert "| engine certificate | not run |" in text and "| bench (short) | not run |" in text
    assert "Not run: engine certificate, bench (short) — `spectr-gbv report --full` runs them." in text
    code = cli_main.main(["report", "--full", "--out", str(out),
                          "--skip", "prove", "certify", "third_party", "vllm", "engine", "bench"])
    text = (out / "REPORT.md").read_text()
    assert code == 1 and "| engine certificate | skipped |" in text and "not run" not in text


def test_report_default_passes_without_claiming_the_parts_not_run(monkeypatch, tmp_path, capsys):
    """The default report passes on its three parts; the --full parts are listed as not run
    (never passed); every part logs timestamped lines on stderr."""
    from spectr_gbv.cli import main as cli_main
    from spectr_gbv.cli import report as report_cli

    def fake(name):
        def part(*_):
            report_cli.log(f"{name}: a step")
            return report_cli.Part(name, "passed", 0.0, f"{name} body")
        return part

    for fn in ("prove_part", "certify_part", "third_party_part", "engine_part", "bench_part"):
        monkeypatch.setattr(report_cli, fn, fake(fn))
    # no vLLM environment: its part says so plainly and counts neither way
    from spectr_gbv.certify.samplers import vllm as vc

    monkeypatch.setattr(vc, "importable_here", lambda: False)
    monkeypatch.setattr(vc, "locate_python", lambda: None)
    code = cli_main.main(["report", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    text = (tmp_path / "REPORT.md").read_text()
    assert code == 0 and "Overall: **PASSED** (the parts run)" in text
    assert "engine_part body" not in text and "bench_part body" not in text
    assert "| vLLM's samplers | not installed |" in text
    assert "No vLLM environment here, so vLLM's samplers were not certified in this report" in text
    assert text.count("| not run |") == 2 and "not run: engine certificate, bench (short)" in out
    lines = err.splitlines()
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d report: .+", line) for line in lines), lines
    assert sum("a step" in line for line in lines) == 3 and "report: running prove ..." in err


def test_report_part_with_a_missing_library_is_not_available():
    """A part whose library is missing is "not available" (a typed error, no text scraping);
    any other exception is "failed" with its traceback."""
    from spectr_gbv.cli.report import _run_part

    def missing():
        import spectr_gbv_no_such_module  # noqa: F401

    part = _run_part("x", missing)
    assert part.status == "not available" and "spectr_gbv_no_such_module not installed" in part.body
    part = _run_part("y", lambda: 1 / 0)
    assert part.status == "failed" and "ZeroDivisionError" in part.body
    assert _run_part("z", lambda: ("passed", "ok")).body == "ok"


def test_sweep_only_settings_run_on_the_first_sweep_prompts(pair):
    config = BenchConfig(methods=("ar", "sd"), prompts=3, max_new_tokens=4, K=1, L=2,
                         temperature=0.9, sweeps=("none", "T"), T_values=(0.5, 0.9),
                         warmup=False, dataset="random", sweep_prompts=1)
    prompts = [PROMPT, PROMPT[::-1], PROMPT[1:]]
    logged = []
    result = run_bench(config, pair=pair, prompt_ids=prompts, progress=False, log=logged.append)
    assert len(logged) == len(result.runs) and logged[-1].startswith(f"{len(result.runs)}/{len(result.runs)} runs: ")
    at = {T: sorted(r["prompt"] for r in result.runs if r["temperature"] == T and r["method"] == "sd")
          for T in (0.5, 0.9)}
    assert at == {0.9: [0, 1, 2], 0.5: [0]}
    assert len(result.runs) == 2 * 3 + 2 * 1
    sweep_rows = [r for r in result.rows if r["temperature"] == 0.5]
    assert sweep_rows and all(r["n_prompts"] == 1 for r in sweep_rows)
    with pytest.raises(ValueError, match="sweep_prompts"):
        BenchConfig(sweep_prompts=0).check()


def test_plot_titles_state_the_real_prompt_counts():
    assert bench_render._prompt_counts([{"n_prompts": 8}, {"n_prompts": 8}]) == "8 prompts"
    assert bench_render._prompt_counts([{"n_prompts": 3}, {"n_prompts": 8}]) == "3-8 prompts per point"
    rows = [{"speedup_ratio": 1.5, "speedup_ratio_q1": 1.2, "speedup_ratio_q3": 1.6},
            {"speedup_ratio": 1.0, "speedup_ratio_q1": 1.0, "speedup_ratio_q3": 1.0}]
    assert bench_render._iqr(rows, "speedup_ratio") == [[pytest.approx(0.3), 0.0], [pytest.approx(0.1), 0.0]]
    assert bench_render._iqr([rows[1]], "speedup_ratio") is None
    assert bench_render._name({"method": "spectr_gbv", "lossless": False}) == "spectr_gbv (lossy)"
