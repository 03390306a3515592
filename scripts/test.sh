#!/usr/bin/env bash
# Sets up (first time), then runs the test suite on CPU (real gloo processes, a real local Ray).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
# The report's browser test drives Debian's Chromium (tests/test_report_browser.py); it skips without one.
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "test: could not install chromium; the report's browser test will be skipped" >&2
fi
# Two test processes (pytest-xdist), each taking whole files, so a module's fixture runs once: on 2
# cores one process leaves the machine ~30 % idle (tests wait on ranks, deadlines, Ray). They share
# one Ray cluster (tests/conftest.py's SharedRay, tests/shared_ray.py). PKB_TEST_WORKERS=0 runs
# everything in this one process.
exec .venv/bin/python -m pytest -q -n "${PKB_TEST_WORKERS:-2}" --dist loadfile "$@"
