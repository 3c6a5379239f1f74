#!/usr/bin/env bash
# One prepared, unattended check for a CUDA machine (at most ~8 minutes on one GPU); CI never runs it.
#
#   bash scripts/device_check.sh [OUT_DIR]        (default: $OUT, else ./device_out)
#
# Writes every table to OUT_DIR (one folder, flat):
#   env.txt                  GPU, driver, torch/triton/vllm versions, what was skipped and why
#   certify_cuda.md          every registered torch verifier certified on CUDA (`certify verifiers --quick
#                            --device cuda`: float32 rows and bfloat16 rows), planted defects caught
#   vllm_native.md           vLLM's samplers natively (no interpreter, no shims), N = 2·10^4 per case
#   engine_qwen.txt          one timed engine run of the Qwen2.5-Coder pair on CUDA
# Each part is skipped, with its reason in env.txt, when what it needs is absent: the device
# machines of this workplace reach no package index, so vLLM (a CUDA build) and the Qwen
# weights must be installed there beforehand or carried (see README, "GPU").  Exit status: 0 when
# every part that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-device_out}}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
note() { echo "$*" | tee -a "$OUT_DIR/env.txt"; }
: > "$OUT_DIR/env.txt"
note "date: $(date -u +%FT%TZ)"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"
note "python: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1)"
if ! $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  note "no CUDA device visible to torch: nothing to check"; exit 1
fi
# the project itself is pure Python: the image's torch/transformers are used as they are
$PY -c 'import scipy, cvxpy' 2>/dev/null || note "warning: scipy/cvxpy missing: the oracle's transport programs are skipped"

# 1. the torch verifiers on CUDA, float32 and bfloat16 rows (the --quick plan: every rule, every planted defect)
if timeout 300 $PY -m spectr_gbv certify verifiers --quick --device cuda --markdown "$OUT_DIR/certify_cuda.md" \
     > "$OUT_DIR/certify_cuda.txt" 2> "$OUT_DIR/certify_cuda.log"; then
  note "certify verifiers --quick --device cuda: CERTIFIED"
else
  note "certify verifiers --quick --device cuda: NOT certified or timed out (exit $?)"; status=1
fi

# 2. vLLM's samplers natively: only where vLLM (a CUDA build) is importable
if $PY -c 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("vllm") else 1)'; then
  note "vllm: $($PY -c 'import vllm; print(vllm.__version__)' 2>&1 | tail -1)"
  if timeout 180 $PY -m spectr_gbv certify samplers vllm --samples 20000 --workers 1 \
       --markdown "$OUT_DIR/vllm_native.md" > "$OUT_DIR/vllm_native.txt" 2> "$OUT_DIR/vllm_native.log"; then
    note "certify samplers vllm (native): every row as expected"
  else
    note "certify samplers vllm (native): NOT as expected or timed out (exit $?)"; status=1
  fi
else
  note "vllm: not installed on this machine: vLLM's native run skipped"
fi

# 3. one timed engine run of the Qwen pair (needs the embedded Qwen GGUF data wheels installed)
if timeout 120 $PY -m spectr_gbv generate --max-new-tokens 64 --temperature 0.7 --seed 1 --no-stream \
     --prompt "Write a Python function that reverses a linked list." > "$OUT_DIR/engine_qwen.txt" 2>&1; then
  note "engine (Qwen pair, CUDA): ran; timings in engine_qwen.txt"
else
  note "engine (Qwen pair, CUDA): skipped or failed (exit $?): see engine_qwen.txt"
fi
exit $status
