#!/usr/bin/env bash
# Creates .venv (once) and installs pkb_ray with everything it needs; fast when already done.
# torch is pinned here to 2.13.0: on our CPU machines that is a CPU build on local disk, whereas
# an open range would pull a multi-GB CUDA build. GPU machines bring their own torch (>= 2.6).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PKB_VENV:-.venv}
stamp="$VENV/.pkb_installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_q() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true; }
"$VENV/bin/python" -c "import torch" 2>/dev/null || pip_q "torch==${PKB_TORCH_VERSION:-2.13.0}"
pip_q -e ".[dev]"
"$VENV/bin/python" -c "import torch, ray, hydra, pydantic, pyarrow, wandb, pytest" \
  || { echo "setup: installation incomplete" >&2; exit 1; }
echo "$want" > "$stamp"
