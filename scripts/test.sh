#!/usr/bin/env bash
# Sets up (first time), then runs the test suite on CPU (real gloo processes, a real local Ray).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The report's browser test drives Debian's Chromium (tests/test_report_browser.py); it skips without one.
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "test: could not install chromium; the report's browser test will be skipped" >&2
fi
exec .venv/bin/python -m pytest -q "$@"
