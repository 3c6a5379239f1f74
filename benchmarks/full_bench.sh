#!/usr/bin/env bash
# The full benchmark behind benchmarks/RESULTS.md and benchmarks/results.json.
# Run on an idle machine (one busy core makes 2-thread torch 10-15x slower here), from the
# repository root, with the project installed (scripts/install.sh):
#     bash benchmarks/full_bench.sh            # ~50 min on the 2-core benchmark machine
# HumanEval: the main point (every method, K = 2, L = 4, T = 0.7) on 8 prompts, the ablations
# (K 1..7, L 2..12, T 0.1..0.7) on the first 3; GSM8K: the main point on 4 prompts.
# RESULTS.md gets a <!-- FINDINGS --> placeholder: the findings are written by a person from the data.
set -euo pipefail
BIN=${SPECTR_GBV:-.venv/bin/spectr-gbv}
OUT=benchmarks/raw
mkdir -p "$OUT" benchmarks/plots
"$BIN" bench --dataset humaneval --prompts 8 --sweep-prompts 3 --sweep all \
    --K 2 1 3 5 7 --L 4 2 8 12 --temperature 0.7 0.1 0.4 --max-new-tokens 64 \
    --json "$OUT/humaneval.json" --runs-json "$OUT/humaneval_runs.json" \
    --markdown "$OUT/humaneval.md" --plots benchmarks/plots
"$BIN" bench --dataset gsm8k --prompts 4 --max-new-tokens 64 \
    --json "$OUT/gsm8k.json" --runs-json "$OUT/gsm8k_runs.json" --markdown "$OUT/gsm8k.md"
"${PYTHON:-.venv/bin/python}" - <<'PY'
import json
rows = []
for name in ("humaneval", "gsm8k"):
    rows += json.load(open(f"benchmarks/raw/{name}.json"))
json.dump(rows, open("benchmarks/results.json", "w"), indent=1)
parts = [open(f"benchmarks/raw/{n}.md").read() for n in ("humaneval", "gsm8k")]
with open("benchmarks/RESULTS.md", "w") as fh:
    fh.write("# Benchmark results\n\nMade by `bash benchmarks/full_bench.sh` (the two `spectr-gbv bench` "
             "commands below); plots in `benchmarks/plots/`.\n\n<!-- FINDINGS -->\n\n## HumanEval\n\n"
             + parts[0] + "\n\n## GSM8K\n\n" + parts[1] + "\n")
PY
echo "wrote benchmarks/results.json and benchmarks/RESULTS.md"
