"""``spectr-gbv exact`` on model files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spectr_gbv.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_json(capsys, *args):
    assert main(["exact", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_exact_json_toy_kseq_gbv(capsys):
    out = run_json(capsys, "--rule", "kseq_gbv", "--K", "2", "--L", "2",
                   "--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json"))
    assert out["expected_accepted"] == pytest.approx(1.526337, abs=5e-7)
    assert out["block_efficiency"] == pytest.approx(out["expected_accepted"] + 1, abs=1e-15)
    assert out["tv_to_target"] <= 1e-12 and out["tokens"] == 4


def test_exact_json_released_rule_is_lossy(capsys):
    out = run_json(capsys, "--rule", "spectr_gbv", "--K", "2", "--L", "2", "--tokens", "1",
                   "--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json"))
    # first token: |4125/13328 − 1/3| on each of the two cells, TV = 1/3 − 4125/13328
    assert out["tv_to_target"] == pytest.approx(1 / 3 - 4125 / 13328, abs=1e-12)
    assert out["expected_accepted"] == pytest.approx(1.403435, abs=5e-7)


def test_exact_prefix_dependent_model_file(tmp_path, capsys):
    draft = {"vocab_size": 2, "conditionals": {"": [0.7, 0.3], "1": [0.2, 0.8]}}
    target = {"vocab_size": 2, "conditionals": {"": [0.4, 0.6], "0": [0.9, 0.1], "0,1": [0.5, 0.5]}}
    (tmp_path / "d.json").write_text(json.dumps(draft))
    (tmp_path / "t.json").write_text(json.dumps(target))
    out = run_json(capsys, "--rule", "gbv", "--K", "1", "--L", "3",
                   "--draft", str(tmp_path / "d.json"), "--target", str(tmp_path / "t.json"))
    assert out["tv_to_target"] <= 1e-12


def test_exact_bad_input_exit_status(tmp_path, capsys):
    (tmp_path / "bad.json").write_text(json.dumps({"vocab_size": 2, "conditionals": {"": [0.7, 0.7]}}))
    code = main(["exact", "--rule", "bv", "--K", "1", "--L", "2", "--draft", str(tmp_path / "bad.json"),
                 "--target", str(EXAMPLES / "toy_target.json")])
    assert code == 2
    err = capsys.readouterr().err
    # one line naming the flag and the file; a single row shows no row index
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"spectr-gbv exact: --draft {tmp_path / 'bad.json'}: ")
    assert "not normalised" in err and "row (0,)" not in err


def test_exact_refuses_sizes_it_cannot_enumerate(capsys):
    """K = 1, L = 1000 used to end in a RecursionError; now the estimate is refused up front."""
    code = main(["exact", "--rule", "sd", "--K", "1", "--L", "1000", "--draft", str(EXAMPLES / "toy_draft.json"),
                 "--target", str(EXAMPLES / "toy_target.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--max-outcomes" in err and "outcomes" in err


def test_console_script_installed():
    out = subprocess.run([sys.executable, "-m", "spectr_gbv.cli.main", "exact", "--rule", "bv", "--K", "1", "--L", "2",
                          "--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json"),
                          "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["expected_accepted"] == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize("dest", ["", "-", "file"])
def test_json_means_the_same_on_every_form(dest, capsys, tmp_path):
    """``--json`` / ``--json -``: the JSON alone on stdout, the text on stderr; ``--json FILE``:
    the JSON in FILE and the text on stdout (the same convention as prove, certify, bench)."""
    flag = ["--json"] + ([] if dest == "" else ["-"] if dest == "-" else [str(tmp_path / "e.json")])
    assert main(["exact", "--rule", "bv", "--K", "1", "--L", "2", *flag,
                 "--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json")]) == 0
    out, err = capsys.readouterr()
    text, blob = (out, (tmp_path / "e.json").read_text()) if dest == "file" else (err, out)
    assert json.loads(blob)["expected_accepted"] == pytest.approx(11 / 9, abs=1e-12)
    assert "E[tau] (one iteration)" in text


def test_exact_capped_blocks(capsys):
    toy = ["--draft", str(EXAMPLES / "toy_draft.json"), "--target", str(EXAMPLES / "toy_target.json")]
    assert run_json(capsys, "--rule", "kseq_gbv", "--K", "2", "--L", "2", *toy)["capped_blocks"] is False
    # BV at L = 2, N = 5: the third iteration's block is capped (proofs_check/BLOCK_CAP.md),
    # which saves drafts but not target calls in expectation; the law stays the target's
    plain = run_json(capsys, "--rule", "bv", "--K", "1", "--L", "2", "--tokens", "5", *toy)
    capped = run_json(capsys, "--rule", "bv", "--K", "1", "--L", "2", "--tokens", "5", "--cap", *toy)
    assert capped["capped_blocks"] is True and capped["tv_to_target"] <= 1e-12
    assert capped["expected_target_calls"] == pytest.approx(plain["expected_target_calls"], abs=1e-12)
    # the capped path is taken: the released (lossy) rule's law moves under the cap
    rel = [run_json(capsys, "--rule", "spectr_gbv", "--K", "2", "--L", "2", "--tokens", "5", *cap, *toy)
           for cap in ([], ["--cap"])]
    assert rel[0]["tv_to_target"] == pytest.approx(0.071458137577380, abs=1e-12)
    assert rel[1]["tv_to_target"] == pytest.approx(0.065161987274747, abs=1e-12)
