#!/usr/bin/env bash
# Runs evalkit's test suite (pytest) in the environment bash/setup.sh made.
# Tests read the benchmark data from ../shared/data (override with EVALKIT_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
exec "$VENV/bin/python" -m pytest "$@"
