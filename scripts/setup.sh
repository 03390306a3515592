#!/usr/bin/env bash
# Creates .venv (once) and installs pkb_ray with what a run needs; fast when already done.
#   scripts/setup.sh          # a run's dependencies (scripts/run.sh)
#   scripts/setup.sh test     # and the test extra: pytest, playwright, moto, ... (scripts/test.sh)
# torch is pinned here to 2.13.0 (the version CI runs) and installed first, so that the open range
# of pyproject.toml adds nothing. Which build (install_torch below): with an NVIDIA GPU (nvidia-smi
# works) or on macOS, PyPI's; otherwise a CPU build: the one pip's configured sources already hold
# (our CI machines: a local +cpu wheel, offline), else PyTorch's CPU index (a laptop), never PyPI's
# multi-GB CUDA build. A venv that already imports torch keeps it (GPU machines bring their own).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PKB_VENV:-.venv}
EXTRA=${1:-}
stamp="$VENV/.pkb_installed${EXTRA:+_$EXTRA}"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
say() { echo "setup: $*" >&2; }  # each step in one line: a first set-up takes a few minutes
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
pip_q() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true; }
TORCH=${PKB_TORCH_VERSION:-2.13.0}
CPU_INDEX=${PKB_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
install_torch() {
  if nvidia-smi >/dev/null 2>&1 || [ "$(uname -s)" = Darwin ]; then
    pip_q "torch==$TORCH"
    return
  fi
  # Resolve without installing (wheel metadata only): is the default choice already a CPU build?
  local report found
  report=$(mktemp)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --dry-run --ignore-installed --no-deps \
    --report "$report" "torch==$TORCH" >/dev/null 2>&1 || true
  found=$("$VENV/bin/python" -c "import json, sys
print(json.load(open(sys.argv[1]))['install'][0]['metadata']['version'])" "$report" 2>/dev/null || true)
  rm -f "$report"
  if [[ "$found" == *+cpu ]]; then
    pip_q "torch==$TORCH"
  else
    echo "setup: no NVIDIA GPU: torch $TORCH+cpu from $CPU_INDEX" >&2
    pip_q --index-url "$CPU_INDEX" "torch==$TORCH+cpu"
  fi
}
"$VENV/bin/python" -c "import torch" 2>/dev/null || { say "installing torch $TORCH (1/2)"; install_torch; }
# without torch here, the next step would take pyproject's range from PyPI: the CUDA build
"$VENV/bin/python" -c "import torch" 2>/dev/null || { echo "setup: torch $TORCH did not install" >&2; exit 1; }
say "installing pkb_ray and its dependencies into $VENV (2/2: Ray, Hydra, W&B, ...${EXTRA:+; the $EXTRA extra})"
pip_q -e ".${EXTRA:+[$EXTRA]}"
"$VENV/bin/python" -c "import torch, ray, hydra, pydantic, pyarrow, wandb${EXTRA:+, pytest}" \
  || { echo "setup: installation incomplete" >&2; exit 1; }
echo "$want" > "$stamp"
say "done ($VENV)"
