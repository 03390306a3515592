#!/usr/bin/env bash
# Sets up (first time), then runs the test suite on CPU (real gloo processes, a real local Ray).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
