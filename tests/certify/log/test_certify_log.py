"""``certify log`` on recorded logs (tests/helpers/recorded_logs.py: the test chain's exact law as
each request asks for it, requests of temperatures 0.7–1.2 with top-p, top-k and min-p mixed in one
file): a correct server PASSes, a planted T 0.9 (0.9 × every request's T) and a silent top-p 0.95
FAIL, shards merged give one pass's certificate, a stopped run resumes to it, and lines that cannot
be tested are skipped and counted."""

from __future__ import annotations

import json

import pytest

from helpers.recorded_logs import make_log
from spectr_gbv.certify.endpoint.report import decided_by
from spectr_gbv.certify.log.run import LogPlan, certify_log, merge_files
from spectr_gbv.certify.log.report import certificate_json, text_report

LINES = 400
PLAN = LogPlan(vocab=64)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    out = {}
    for defect in (None, "temperature-0.9", "top-p-0.95"):
        p = d / f"log-{defect or 'correct'}.jsonl"
        make_log(p, LINES, seed=2, defect=defect)
        out[defect] = str(p)
    return out


def _stable(cert):
    """The certificate's JSON without what depends on the run (time, files, workers), its floats
    rounded to 9 significant digits: the sums of shards add in another order than one pass's
    (equal to ~1e-15 relative), every count, row, verdict and decision equal."""
    d = certificate_json(cert)
    for key in ("wall_s", "chunk_cpu_s", "peak_rss_kib", "tokens_per_second", "source", "ranges", "notes", "complete", "plan"):
        d.pop(key)
    for lk in d["looks"]:  # the lines a look covers are the ranges, in pieces after a merge
        lk.pop("lines")
    return _round(d)


def _round(x):
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    if isinstance(x, float) and x == x and abs(x) != float("inf"):
        return float(f"{x:.9g}")
    return x


def test_correct_server_passes_with_mixed_temperatures(logs):
    cert = certify_log(logs[None], PLAN)
    assert cert.verdict == "PASS", text_report(cert)
    t = cert.tally
    assert t.counts["lines"] == LINES and t.counts["samples"] >= 390
    assert {float(k) for k in t.temperatures} == {0.7, 0.8, 0.9, 1.0, 1.2}
    assert t.counts["records"] > 4000  # of 6,400 positions: the rest skipped with their reasons
    assert sum(t.skipped_positions.values()) + t.counts["records"] == LINES * 16
    for d in cert.family.directional:
        assert d.pvalue > 0.01, d
    assert cert.reports and cert.reports[0].passed


def test_planted_temperature_fails_on_the_temperature_test(logs):
    cert = certify_log(logs["temperature-0.9"], PLAN)
    assert cert.verdict == "FAIL"
    temp = cert.family.test("temperature")
    assert not temp.passed and temp.statistic > 20 and temp.sided == 1  # colder than asked
    # a colder sampler also leaves the nuclei less often: the truncation test fails beside it
    assert any(line.startswith("temperature (log W") for line in decided_by(cert))
    assert any(line.startswith("  temperature:") and line.endswith("<- FAIL")
               for line in text_report(cert).splitlines())


def test_silent_top_p_fails_on_the_truncation_test(logs):
    cert = certify_log(logs["top-p-0.95"], PLAN)
    assert cert.verdict == "FAIL"
    trunc = cert.family.test("truncation")
    assert not trunc.passed and trunc.name == "truncation (top-p 0.95)" and trunc.observed == 0
    assert trunc.statistic > 40
    assert "decided by truncation (top-p 0.95)" in text_report(cert).splitlines()[0]


def test_shards_merge_to_one_pass(logs, tmp_path):
    """Three shards by --lines, and a split piece by --first-line, merge to one pass's
    certificate exactly (every row, p-value and count)."""
    one = certify_log(logs["temperature-0.9"], PLAN)
    parts = []
    for i, (a, b) in enumerate(((0, 150), (150, 151), (151, None))):
        out = str(tmp_path / f"part{i}.json")
        certify_log(logs["temperature-0.9"], PLAN, start=a, stop=b, out=out)
        parts.append(out)
    merged = merge_files(parts)
    assert merged.verdict == one.verdict == "FAIL"
    assert _stable(merged) == _stable(one)
    # a piece of a split log keeps its place with --first-line
    lines = open(logs["temperature-0.9"]).read().splitlines(keepends=True)
    head, tail = tmp_path / "head.jsonl", tmp_path / "tail.jsonl"
    head.write_text("".join(lines[:200]))
    tail.write_text("".join(lines[200:]))
    certify_log(str(head), PLAN, out=str(tmp_path / "h.json"))
    certify_log(str(tail), PLAN, first_line=200, out=str(tmp_path / "t.json"))
    assert _stable(merge_files([str(tmp_path / "t.json"), str(tmp_path / "h.json")])) == _stable(one)
    with pytest.raises(ValueError, match="overlap"):
        merge_files([parts[0], parts[0]])
    other = str(tmp_path / "seed1.json")
    certify_log(str(head), LogPlan(vocab=64, seed=1), out=other)
    with pytest.raises(ValueError, match="different seed"):
        merge_files([other, str(tmp_path / "t.json")])


def test_a_stopped_run_resumes_to_one_pass_at_its_next_look(logs, tmp_path):
    """A run stopped at line 123 showed its tests (look 1); resumed, it is look 2 of the same
    certificate: every count and e-value one pass's, the KS rows and the other-cell test at
    α_2 = α/6 instead of α_1 = α/2 (oracle.look_spending)."""
    one = certify_log(logs[None], PLAN)
    out = str(tmp_path / "partial.json")
    first = certify_log(logs[None], PLAN, stop=123, out=out)
    assert first.look == 1 and [lk["j"] for lk in json.load(open(out))["looks"]] == [1]
    resumed = certify_log(logs[None], PLAN, resume=out)  # writes back to the file it resumed
    assert resumed.look == 2 and resumed.verdict == "PASS"
    saved = json.load(open(out))
    assert saved["ranges"][0][:2] == [0, LINES]
    assert [(lk["j"], lk["lines"], lk["alpha"]) for lk in saved["looks"]] == [
        (1, [[0, 123]], pytest.approx(5e-4, rel=1e-12)), (2, [[0, LINES]], pytest.approx(1e-3 / 6, rel=1e-12))]
    a, b = _stable(resumed), _stable(one)
    for d in (a, b):
        d.pop("look"), d.pop("looks")
    for d in a["family"]["directional"]:
        assert d["alpha"] == pytest.approx(1e-3 * 3 / 4 / 3, rel=1e-12)  # the e-values: their whole share
    rows_a, rows_b = a["family"].pop("rows"), b["family"].pop("rows")
    assert [r["alpha"] / s["alpha"] for r, s in zip(rows_a, rows_b)] == pytest.approx([1 / 3] * len(rows_a), rel=1e-8)  # rounded to 9 digits
    assert [(r["statistic"], r["n"]) for r in rows_a] == [(r["statistic"], r["n"]) for r in rows_b]
    assert a["reports"][0]["alpha"] == pytest.approx(b["reports"][0]["alpha"] / 3, rel=1e-12)
    for d in (a, b):
        d["reports"][0].pop("alpha"), d["family"].pop("alpha"), d["family"].pop("detectable")
    assert a == b
    # the log did not grow: the last look is shown again, not a new one
    again = certify_log(logs[None], PLAN, resume=out)
    assert again.look == 2 and len(json.load(open(out))["looks"]) == 2
    assert any("shown again" in n for n in again.notes)


def test_a_failed_certificate_is_not_continued(logs, tmp_path):
    out = str(tmp_path / "failed.json")
    assert certify_log(logs["temperature-0.9"], PLAN, stop=200, out=out).verdict == "FAIL"
    with pytest.raises(ValueError, match="look 1 of the certificate .* FAILED and its verdict stands"):
        certify_log(logs["temperature-0.9"], PLAN, resume=out)


def test_two_workers_give_one_workers_certificate(logs):
    plan2 = LogPlan(vocab=64, workers=2)
    assert _stable(certify_log(logs["top-p-0.95"], plan2)) == _stable(certify_log(logs["top-p-0.95"], PLAN))


def test_lines_that_cannot_be_tested_are_skipped_and_counted(tmp_path):
    p = tmp_path / "mixed.jsonl"
    extra = ["not json", json.dumps({"request": {"prompt": "a"}, "response": {"choices": [{"text": "b"}]}}),
             json.dumps({"request": {"prompt": "a", "logprobs": 5, "temperature": 0},
                         "response": {"choices": [{"text": "b", "logprobs": {"tokens": ["b"], "token_logprobs": [-0.1],
                                                                            "top_logprobs": [{"b": -0.1}]}}]}}),
             json.dumps({"request": {"prompt": "a", "logprobs": 5, "presence_penalty": 0.5},
                         "response": {"choices": [{"text": "b"}]}}),
             json.dumps({"request": {"prompt": "a", "logprobs": 5}, "response": {"error": "overloaded"}})]
    make_log(p, 60, seed=3, extra=extra)
    cert = certify_log(str(p), PLAN)
    assert cert.verdict == "PASS"
    assert cert.tally.counts["lines"] == 65
    assert dict(cert.tally.skipped) == {"json": 1, "nologprobs": 1, "greedy": 1, "penalties": 1, "error": 1}
    text = text_report(cert)
    assert "skipped 1 samples: greedy decoding (temperature 0)" in text
    # a file with nothing to test says so, and is no PASS
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n".join(extra) + "\n")
    none = certify_log(str(empty), PLAN)
    assert none.verdict == "NO DATA" and none.family is None


def test_text_tokens_give_the_token_ids_certificate(logs, tmp_path):
    """The same log with text tokens (OpenAI's shape: no ids) instead of "token_id:N": the same
    tokens tested and the same directional statistics (they do not depend on the id order)."""
    text = tmp_path / "text.jsonl"
    with open(logs["top-p-0.95"]) as src, open(text, "w") as dst:
        for line in src:
            dst.write(line.replace('"token_id:', '"tok '))
    a, b = certify_log(logs["top-p-0.95"], PLAN), certify_log(str(text), PLAN)
    assert a.verdict == b.verdict == "FAIL" and a.tally.counts == b.tally.counts
    for x, y in zip(a.family.directional, b.family.directional):
        assert x.name == y.name and x.statistic == pytest.approx(y.statistic, rel=1e-9)


def test_false_alarms_of_correct_logs_within_alpha(tmp_path):
    """40 correct logs of 100 lines (mixed requests, their bounds and skips) at alpha 0.1: at most
    10 may fail (Binomial(40, 0.1) > 10 has probability 0.002); measured 0 of 40 (the bounds and the
    binned KS are conservative)."""
    fails = 0
    for s in range(40):
        p = tmp_path / f"log{s}.jsonl"
        make_log(p, 100, seed=1000 + s)
        fails += certify_log(str(p), LogPlan(vocab=64, alpha=0.1)).verdict != "PASS"
    assert fails <= 10
    assert fails == 0  # as measured (deterministic seeds)


def _edge_lines(line: str) -> list:
    """Variants of one log line that msgspec refuses and ``json`` reads (or refuses too): an own
    log-prob of -Infinity, NaN in a top list, a temperature of 1e400, a text token with a lone
    surrogate, and a byte that is not UTF-8 (a temperature given twice: the last one counts); and one that
    both read (a 30-digit integer)."""
    obj = json.loads(line)
    lp = obj["response"]["choices"][0]["logprobs"]
    first = next(iter(lp["top_logprobs"][2]))
    minus_inf = json.loads(line)
    minus_inf["response"]["choices"][0]["logprobs"]["token_logprobs"][3] = float("-inf")
    nan = json.loads(line)
    nan["response"]["choices"][0]["logprobs"]["top_logprobs"][2][first] = float("nan")
    text = line.replace('"token_id:1', '"tok\\ud800 ').replace('"token_id:', '"tok ')
    huge = json.dumps(obj).replace('"seed": ', '"seed": 123456789012345678901234567890, "seed0": ', 1)
    hot = json.dumps(obj).replace('"max_tokens": ', '"temperature": 1e400, "max_tokens": ', 1)
    return [json.dumps(minus_inf).encode(), json.dumps(nan).encode(), text.encode(), huge.encode(), hot.encode(),
            line.encode().replace(b'"token_id:', b'"\xff', 1)]


def test_the_stdlib_decoder_gives_the_fast_decoders_tally(logs, monkeypatch):
    """parse.decode: msgspec when installed, json else or where msgspec refuses a line; both paths
    give one tally, edge lines (``_edge_lines``) included."""
    pytest.importorskip("msgspec")
    from spectr_gbv.certify.log import parse
    from spectr_gbv.certify.log.run import tally_lines

    with open(logs[None], "rb") as f:
        raw = f.read().splitlines()[:60]
    edges = [e for line in raw[:4] for e in _edge_lines(line.decode())]
    for e in edges[:3] + edges[4:5] + edges[5:6]:
        with pytest.raises(parse._FAST_REFUSED):
            parse._FAST_DECODE(e)
    lines = list(enumerate(raw + edges))
    fast = tally_lines(lines, PLAN).to_json()
    monkeypatch.setattr(parse, "_FAST_DECODE", None)
    slow = tally_lines(lines, PLAN).to_json()
    assert fast == slow
    assert fast["counts"]["impossible"] >= 1 and fast["skipped"]["json"] == 4 and fast["skipped"]["params"] >= 1


def test_request_fields_past_any_vocabulary_mean_what_they_say(logs, tmp_path):
    """logprobs 10^30 (every entry listed) and top_k 10^30 (no cut) read as the lines' own k and no
    top-k: the same tally, no overflow (they crashed the run before)."""
    lines = open(logs[None]).read().splitlines()[:40]
    big = []
    for text in lines:
        d = json.loads(text)
        d["request"]["logprobs"] = 10**30
        if d["request"].get("top_k") in (None, -1, 0):
            d["request"]["top_k"] = 10**30
        big.append(json.dumps(d))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(lines) + "\n")
    b.write_text("\n".join(big) + "\n")
    one, two = certify_log(str(a), PLAN), certify_log(str(b), PLAN)
    assert two.tally.counts == one.tally.counts and two.verdict == one.verdict == "PASS"


def test_a_certificate_resumes_only_on_the_log_it_covers(logs, tmp_path):
    """The partial result keeps a digest of the lines it covers: another log, a rotated one (the same
    path, new contents) or a shorter one is refused instead of being credited with lines it never
    read; a resumption keeps --vocab and --max-bound."""
    lines = open(logs[None]).read().splitlines(keepends=True)
    grown = tmp_path / "grown.jsonl"
    grown.write_text("".join(lines[:200]))
    part = str(tmp_path / "p.json")
    certify_log(str(grown), PLAN, out=part)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(open(logs["top-p-0.95"]).read().splitlines(keepends=True)[:300]))
    with pytest.raises(ValueError, match="lines 0..199 of .* differ from those the certificate .* covers"):
        certify_log(str(other), PLAN, resume=part)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(lines[:100]))
    with pytest.raises(ValueError, match="has 100 lines; the certificate in .* covers lines 0..199"):
        certify_log(str(short), PLAN, resume=part)
    with pytest.raises(ValueError, match="was run with --vocab 64, this run asks 0"):
        certify_log(str(grown), LogPlan(), resume=part)
    with pytest.raises(ValueError, match="was run with --max-bound"):
        certify_log(str(grown), LogPlan(vocab=64, max_bound=0.5), resume=part)
    # the same log grown, its last line still being written (no end of line): that line waits
    with open(grown, "a") as f:
        f.write("".join(lines[200:300]) + lines[300][:500])
    second = certify_log(str(grown), PLAN, resume=part)
    assert second.look == 2 and second.tally.ranges[0][:2] == [0, 300] and not second.tally.skipped
    assert any("line 300 has no end of line yet" in n for n in second.notes)
    with open(grown, "a") as f:
        f.write(lines[300][500:] + "".join(lines[301:LINES]))
    third = certify_log(str(grown), PLAN, resume=part)
    one = certify_log(logs[None], PLAN)
    assert third.look == 3 and third.tally.counts == one.tally.counts and not third.tally.skipped
