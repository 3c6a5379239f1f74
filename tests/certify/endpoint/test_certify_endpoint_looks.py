"""A certificate continued with ``--resume`` (``oracle.look_spending``): its looks are counted
over every run of the run file, look j's fixed-sample tests (omnibus KS rows, report tests) take
α_j = α/(j(j+1)), the directional e-values their whole share; a run file whose look FAILed, or a
plan that asks no more samples than its looks tested, is not continued.  In process (the fake
deployment without HTTP, ``helpers.in_process_deployment``).  The false-alarm rate over 100 looks
is measured in benchmarks/REPEATED_LOOKS.md."""

import json

import pytest

from helpers.in_process_deployment import Engine, Reference
from spectr_gbv.certify.endpoint.run import Plan, certify_deployment, continuation_problem, plan_dict
from spectr_gbv.certify.endpoint.store import RunFile

PROMPTS = [[1], [2], [3]]


def _run(path, plan, resume, defect=None):
    engine = Engine(defect=defect)
    run_file = RunFile(path, plan_dict(plan), resume=resume)
    return certify_deployment(engine, Reference(engine.server), PROMPTS, plan, run_file)


def _looks(path):
    return [e for e in map(json.loads, open(path)) if e["kind"] == "look"]


def test_a_fixed_plan_continued_is_the_next_look(tmp_path):
    path = tmp_path / "r.jsonl"
    first = _run(path, Plan(n_samples=24, n_new=8, replays=0, concurrency=1), resume=False)
    assert first.verdict == "PASS" and first.look == 1 and first.family.alpha == pytest.approx(5e-4, rel=1e-12)
    more = _run(path, Plan(n_samples=48, n_new=8, replays=0, concurrency=1), resume=True)
    assert more.verdict == "PASS" and more.look == 2 and more.new_samples == 24 and more.samples == 48
    assert more.family.alpha == pytest.approx(1e-3 / 6, rel=1e-12)
    assert all(r.alpha < 1e-3 / 6 for r in more.family.rows)  # shares of alpha_2
    # the e-values at their whole share at every look: 3/4 of alpha over the three directional tests
    assert [d.alpha for d in more.family.directional] == [d.alpha for d in first.family.directional] == [2.5e-4] * 3
    assert [(e["j"], e["n"], e["verdict"]) for e in _looks(path)] == [(1, 24, "pass"), (2, 48, "pass")]
    assert any("1 look taken (the last tested 24 samples, pass)" in n for n in more.notes)
    # the same plan again: nothing to continue (a new look on the same samples would spend alpha for nothing)
    plan = Plan(n_samples=48, n_new=8, replays=0, concurrency=1)
    with pytest.raises(ValueError, match="nothing to continue; ask more \\(--samples above 48\\)"):
        _run(path, plan, resume=True)
    assert len(_looks(path)) == 2


def test_a_sequential_plan_continued_goes_on_from_its_last_look(tmp_path):
    path = tmp_path / "s.jsonl"
    plan = Plan(n_samples=16, n_new=8, sequential=True, max_samples=32, replays=0, concurrency=1)
    first = _run(path, plan, resume=False)
    assert first.sequence["tested"] == [16, 32] and first.sequence["numbers"] == [1, 2]
    plan = Plan(n_samples=16, n_new=8, sequential=True, max_samples=128, replays=0, concurrency=1)
    more = _run(path, plan, resume=True)
    # looks 16 and 32 are not taken again: the next are 64 and 128, looks 3 and 4 of the certificate
    assert more.sequence["tested"] == [64, 128] and more.sequence["numbers"] == [3, 4]
    assert more.sequence["alphas"] == pytest.approx([1e-3 / 12, 1e-3 / 20], rel=1e-12)
    assert more.family.alpha == pytest.approx(1e-3 / 20, rel=1e-12) and more.look == 4
    assert [e["j"] for e in _looks(path)] == [1, 2, 3, 4]


def test_a_failed_certificate_is_not_continued(tmp_path):
    path = tmp_path / "f.jsonl"
    plan = Plan(n_samples=200, n_new=16, replays=0, concurrency=1)
    bad = _run(path, plan, resume=False, defect="temperature-0.9")
    assert bad.verdict == "FAIL" and _looks(path)[-1]["verdict"] == "FAIL"
    plan = Plan(n_samples=400, n_new=16, replays=0, concurrency=1)
    with pytest.raises(ValueError, match="look 1 of this certificate \\(200 samples\\) FAILED and its verdict stands"):
        _run(path, plan, resume=True, defect="temperature-0.9")
    rf = RunFile(path, plan_dict(plan), resume=True)
    assert "FAILED" in continuation_problem(rf, plan)
    rf.close()


def test_alpha_and_tolerance_are_those_of_the_certificate(tmp_path):
    path = tmp_path / "a.jsonl"
    _run(path, Plan(n_samples=8, n_new=8, replays=0, concurrency=1), resume=False)
    for change in ({"alpha": 1e-2}, {"tolerance": 0.01}):
        plan = Plan(n_samples=16, n_new=8, replays=0, concurrency=1, **change)
        key = next(iter(change))
        with pytest.raises(ValueError, match=f"the run was made with {key} = "):
            RunFile(path, plan_dict(plan), resume=True)


def test_the_command_continues_a_certificate_and_refuses_nothing_new(capsys, tmp_path):
    from helpers.fake_deployment import serve
    from spectr_gbv.cli import main as cli_main

    run = str(tmp_path / "run.jsonl")
    with serve() as (url, _):
        base = ["certify", "endpoint", url, "--max-new-tokens", "8"]
        assert cli_main.main(base + ["--samples", "16", "--record", run]) == 0
        first = capsys.readouterr().out
        assert "look 1 of this certificate: the omnibus rows and report tests at alpha_j = alpha/(j(j+1)) = 0.0005" in first
        code = cli_main.main(base + ["--samples", "16", "--resume", run])
        err = capsys.readouterr().err
        assert code == 2 and "nothing to continue; ask more (--samples above 16)" in err
        assert cli_main.main(base + ["--samples", "32", "--resume", run, "--json", str(tmp_path / "c.json")]) == 0
        out = capsys.readouterr().out
    assert "look 2 of this certificate" in out and "(0.00067 of alpha spent by looks 1..2)" in out
    cert = json.load(open(tmp_path / "c.json"))
    assert cert["look"]["j"] == 2 and cert["samples"] == 32 and cert["new_samples"] == 16


def test_a_stop_before_any_new_sample_is_no_new_look(tmp_path):
    """Ctrl-C on a resumed run before a sample beyond the last look's is in: that look's results
    stand, no look is spent on the same samples."""
    import signal

    path = tmp_path / "c.jsonl"
    _run(path, Plan(n_samples=16, n_new=8, replays=0, concurrency=1), resume=False)
    plan = Plan(n_samples=32, n_new=8, replays=0, concurrency=1)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist workers ignore SIGINT
    try:
        engine = Engine(stop_at=1, delay_s=0.5)  # the interrupt lands while the first new sample is asked
        cert = certify_deployment(engine, Reference(engine.server), PROMPTS, plan,
                                  RunFile(path, plan_dict(plan), resume=True))
    finally:
        signal.signal(signal.SIGINT, saved)
    assert cert.verdict == "INCOMPLETE" and cert.look == 0 and cert.family is None
    assert any("no sample beyond the 16 the certificate's last look tested: no new look" in n for n in cert.notes)
    assert [e["j"] for e in _looks(path)] == [1]
