#!/usr/bin/env bash
# Sets up (first time), then runs one sweep job: python -m pkb_ray.sweep [overrides...].
# With no overrides: local Ray, the replay sample set in samples/replay, gloo on CPU, W&B offline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pkb_ray.sweep "$@"
