#!/usr/bin/env bash
# Install kttune and what it needs into the active Python (a venv is fine), idempotently.
#   torch:     kept if already importable; else the pinned CPU build (never let pip pull a CUDA wheel
#              as a side effect of a plain `torch` requirement).
#   kt-kernel: installed WITHOUT its dependencies (it pins an old torch); its import needs numpy,
#              safetensors and gguf, which come with kttune's own requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_q() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
"$PY" -c "import torch" 2>/dev/null || pip_q "torch==${KTTUNE_TORCH_VERSION:-2.13.0}"
"$PY" -c "import kt_kernel" 2>/dev/null || pip_q --no-deps "kt-kernel==0.7.2" \
  || echo "setup: kt-kernel could not be installed; kttune will time its torch CPU fallback instead" >&2
pip_q -e ".[measure,test,kt,plot]"
"$PY" -c "import kttune, optuna, typer, rich" && echo "setup: kttune ready ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
