"""Seed replays of ``certify_deployment``: samples 0 … replays − 1 are asked again as soon as each is
in, ahead of the samples still queued — not after the last sample, when they would run alone on
the server and lengthen the run (against vLLM's CPU server: ~1.5 s of a 19 s run,
benchmarks/REPORTED.md) — and never with more than ``concurrency`` requests in flight."""

from helpers.in_process_deployment import Engine, Reference
from spectr_gbv.certify.endpoint.run import Plan, certify_deployment, plan_dict, sample_seed
from spectr_gbv.certify.endpoint.store import RunFile


def test_replays_are_asked_as_their_samples_arrive(tmp_path):
    engine = Engine(delay_s=0.01)  # a server's 10 ms a request: the main thread keeps up with the answers
    plan = Plan(n_samples=40, n_new=8, replays=3, concurrency=1)
    cert = certify_deployment(engine, Reference(engine.server), [[1], [2]], plan,
                              RunFile(tmp_path / "r.jsonl", plan_dict(plan)))
    assert cert.verdict == "PASS" and cert.replays == (3, 3) and engine.calls == 43
    seeds = [sample_seed(plan.seed, i) for i in range(3)]
    again = [n for n, s in enumerate(engine.seeds) if s in seeds and engine.seeds.index(s) < n]
    assert len(again) == 3 and max(again) < 20, engine.seeds  # not after the last sample (calls 40-42)


def test_a_resumed_run_replays_what_its_first_run_did_not(tmp_path):
    path = tmp_path / "r.jsonl"
    plan = Plan(n_samples=8, n_new=8, replays=0, concurrency=2)
    engine = Engine()
    certify_deployment(engine, Reference(engine.server), [[1], [2]], plan, RunFile(path, plan_dict(plan)))
    plan = Plan(n_samples=16, n_new=8, replays=3, concurrency=2)
    engine = Engine()
    cert = certify_deployment(engine, Reference(engine.server), [[1], [2]], plan,
                              RunFile(path, plan_dict(plan), resume=True))
    assert cert.replays == (3, 3) and engine.calls == 8 + 3 and cert.samples == 16
