"""``spectr-gbv certify log``: exit status and report of a run, shards and --merge through the
command line, the JSON, and bad arguments as one line naming the argument (exit 2)."""

from __future__ import annotations

import json

import pytest

from helpers.recorded_logs import make_log
from spectr_gbv.cli import main as cli_main


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "top-p.jsonl"
    make_log(p, 200, seed=5, defect="top-p-0.95")
    return str(p)


def test_run_shards_and_merge(capsys, log_file, tmp_path):
    code = cli_main.main(["certify", "log", log_file, "--vocab", "64", "--json", str(tmp_path / "one.json")])
    out = capsys.readouterr().out
    assert code == 1 and out.splitlines()[0].startswith("verdict: FAIL — decided by truncation (top-p 0.95)")
    assert out.splitlines()[-1] == "what certify log sees and misses: docs/guarantees.md#certify-a-log"
    one = json.load(open(tmp_path / "one.json"))
    assert one["verdict"] == "FAIL" and one["lines"] == 200 and one["family"]["n_tokens"] > 2000
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert cli_main.main(["certify", "log", log_file, "--vocab", "64", "--lines", "0:100", "--out", a]) == 1
    assert cli_main.main(["certify", "log", log_file, "--vocab", "64", "--lines", "100:", "--out", b]) == 1
    capsys.readouterr()
    code = cli_main.main(["certify", "log", "--merge", a, b, "--json", "-"])
    captured = capsys.readouterr()
    merged = json.loads(captured.out)
    assert code == 1 and merged["verdict"] == "FAIL" and captured.err.startswith("verdict: FAIL")
    assert merged["family"]["n_tokens"] == one["family"]["n_tokens"]
    assert [d["name"] for d in merged["family"]["directional"]] == [d["name"] for d in one["family"]["directional"]]
    want = one["family"]["directional"][1]["statistic"]
    assert merged["family"]["directional"][1]["statistic"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("argv,needle", [
    (["certify", "log"], "FILE is required"),
    (["certify", "log", "--merge"], "--merge"),
    (["certify", "log", "LOG", "--lines", "5:2"], "--lines"),
    (["certify", "log", "LOG", "--lines", "x"], "--lines"),
    (["certify", "log", "LOG", "--tolerance", "2"], "--tolerance"),
    (["certify", "log", "LOG", "--merge", "LOG"], "not both"),
    (["certify", "log", "--merge", "LOG", "--out", "x.json"], "--out"),
    (["certify", "log", "--merge", "LOG"], "not JSON"),
    (["certify", "log", "/no/such/file.jsonl"], "/no/such/file.jsonl"),
])
def test_bad_arguments_are_one_line(capsys, log_file, argv, needle):
    argv = [log_file if a == "LOG" else a for a in argv]
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spectr-gbv certify log") and needle in err[0], err


def test_two_workers_under_the_progress_bar_finish(log_file):
    """The command with --workers 2 and its progress bar, three times in fresh processes: each ends
    with a verdict within 120 s (workers forked from the main process while the bar's thread held
    a lock hung there: seen on a 300-line log)."""
    import subprocess
    import sys

    for _ in range(3):
        out = subprocess.run([sys.executable, "-m", "spectr_gbv", "certify", "log", log_file, "--vocab", "64",
                              "--workers", "2"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 1 and out.stdout.startswith("verdict: FAIL"), out.stderr[-2000:]
