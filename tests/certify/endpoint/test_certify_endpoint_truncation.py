"""Silent truncations caught by ``certify endpoint`` at N = 24 samples (the truncation e-value of
oracle/sequence_scores.py, exact in size at every N; its share 2.5e-4 of α = 1e-3).

On the V = 64 chain with reference ``self`` (top 20): top-p 0.95 and min-p 0.05 FAIL at 24 × 16
tokens (measured by simulation at the same share: power 1.0 at N = 24 for both, 0.025 at N = 16
for top-p 0.95, 1.0 at N = 8 for min-p 0.05).  A top-k 50 on that chain removes only tokens ranked
51–64, inside the top-20 reference's "other" cell: not seen, as every verdict says.  With a
whole-law reference it is: on the tiny model's server (V = 49,152, reference ``hf:tiny``, the
default prompts), a silent top-k 50 FAILs at 24 samples × 16 tokens (measured: log W 22.4,
p 1.9e-10, 23.1 tokens outside the top 50 expected and 0 seen; at 12 samples log W 9.8, p 5.8e-5,
already below its 2.5e-4; the normal approximation it replaced gave z −2.87 at 24, not caught).
"""

import json

import pytest

from helpers.fake_deployment import serve
from spectr_gbv.cli import main as cli_main


def _run(capsys, url, tmp_path, *extra, name="run"):
    out = tmp_path / f"{name}.json"
    argv = ["certify", "endpoint", url, "--json", str(out), "--record", str(tmp_path / f"{name}.jsonl")] + list(extra)
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize("defect,level", [("top-p-0.95", "top-p"), ("min-p-0.05", "min-p")])
def test_a_silent_truncation_fails_at_24_samples(capsys, tmp_path, defect, level):
    with serve(defect) as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path, "--samples", "24")
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    trunc = next(d for d in cert["family"]["directional"] if d["name"].startswith("truncation"))
    assert not trunc["passed"] and trunc["name"].startswith(f"truncation ({level}") and trunc["observed"] == 0
    assert trunc["alpha"] == 2.5e-4 and trunc["pvalue"] < 2.5e-4
    assert out.splitlines()[0].startswith("verdict: FAIL — decided by truncation")


@pytest.mark.models
def test_a_silent_top_k_50_fails_on_the_tiny_models_server(capsys, tmp_path):
    pytest.importorskip("transformers")
    from helpers.fake_deployment import TinyModel

    with serve("top-k-50", model=TinyModel()) as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path, "--reference", "hf:tiny", "--samples", "24",
                                    "--max-new-tokens", "16")
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    trunc = next(d for d in cert["family"]["directional"] if d["name"].startswith("truncation"))
    assert not trunc["passed"] and trunc["observed"] == 0 and trunc["name"] == "truncation (top-k 50)"
