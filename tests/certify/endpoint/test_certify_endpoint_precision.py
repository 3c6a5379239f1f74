"""``certify endpoint`` against servers whose log-probabilities are right to the precision they send
(tests/helpers/fake_deployment.py: the V = 64 chain, reference ``self``, top 20; the default plan,
80 samples × 16 tokens, α = 1e-3), and against one whose top-k lists claim the whole law while the
samples leave them.

- Rounded to 2 decimals: a top-20 list sums above 1 by up to ~0.5 % (refused as "not a law"
  before: every sample's reference an error, the run INCOMPLETE); now each list's cells tolerate
  its precision (oracle/sequence_records.py) and a server whose law is right PASSes.
- float32 values on a chain whose top 20 hold all but ~1e-7 of each law: the reported top 20 sum
  to ≥ 1 in many rows, where the "other" cell was 0 and a sampled tail token "impossible"; it is
  now the precision's bound, never 0.
- Lists renormalised over the top 20 ("renormalised-top"): the other-cell test
  (oracle/sequence_reports.py) FAILs, each token outside a list counted there, none impossible.
"""

import json

import numpy as np
import pytest

from helpers.fake_deployment import serve
from spectr_gbv.cli import main as cli_main
from spectr_gbv.oracle.sequence_simulation import MarkovChain


def _run(capsys, url, tmp_path, *extra, name="run"):
    out = tmp_path / f"{name}.json"
    argv = ["certify", "endpoint", url, "--json", str(out), "--record", str(tmp_path / f"{name}.jsonl")] + list(extra)
    if not {"--samples", "--max-samples", "--max-time"} & set(extra):
        argv += ["--samples", "80"]  # the fixed plan these tests were sized for (the default is sequential)
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err, json.loads(out.read_text()) if out.exists() else None


def test_a_server_rounding_its_logprobs_to_two_decimals_passes(capsys, tmp_path):
    with serve("rounded-logprobs") as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 0 and cert["verdict"] == "PASS" and cert["samples"] == 80, out + err
    assert cert["errors"] == {} and cert["impossible"] == [] and cert["family"]["impossible"] == 0
    # the reported log-probabilities agree with the (rounded) reference to the rounding
    assert cert["logprobs"]["largest"] < 0.011


def test_a_float32_top_list_of_a_chain_with_a_tiny_tail_passes(capsys, tmp_path):
    rng = np.random.default_rng(5)
    logits = np.full((64, 64), -17.0)
    for row in logits:
        row[rng.choice(64, 20, replace=False)] = rng.normal(0.0, 1.0, 20)
    chain = MarkovChain(64, base=logits, noise=0.0)
    tails = 1 - np.sort(chain.probs, axis=1)[:, ::-1][:, :20].sum(axis=1)
    assert 2e-8 < tails.min() and tails.max() < 2e-7
    # a float32 log-softmax (as the server computes it) makes the reported top 20 sum to ≥ 1 in 10 of
    # the 64 rows: "other" was 0 there
    z = np.log(chain.probs).astype(np.float32)
    lp32 = (z - np.log(np.exp(z).sum(axis=1, dtype=np.float32))[:, None]).astype(np.float64)
    assert (np.exp(np.sort(lp32, axis=1)[:, -20:]).sum(axis=1) >= 1).sum() == 10
    with serve("float32-logprobs", model=chain) as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 0 and cert["verdict"] == "PASS", out + err
    assert cert["impossible"] == [] and cert["family"]["impossible"] == 0
    other = next(r for r in cert["reports"] if r["name"] == "reported top-k: other cell")
    assert other["passed"] and other["n"] > 1000  # most positions claim nearly the whole law


def test_top_lists_renormalised_over_k_fail_the_other_cell_test_not_as_impossible(capsys, tmp_path):
    with serve("renormalised-top") as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    assert cert["impossible"] == [] and cert["family"]["impossible"] == 0
    other = next(r for r in cert["reports"] if r["name"] == "reported top-k: other cell")
    assert not other["passed"] and other["observed"] >= 5 and other["pvalue"] < 1e-20
    assert other["alpha"] == pytest.approx(1e-3 / 2 / 16 / 3, rel=1e-12)  # the report share, split with the log-prob shift and independence tests
    line = next(x for x in out.splitlines() if x.startswith("reported top-k: other cell"))
    assert line.endswith("<- FAIL") and "outside top-k lists" in line
