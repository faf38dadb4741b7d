#!/usr/bin/env bash
# Runs evalkit's test suite (pytest) in the environment bash/setup.sh made.
#   bash bash/test.sh            the fast lane: every test not marked slow (-m "not slow")
#   bash bash/test.sh --all      every test (what .ci/run runs)
# Every other argument goes to pytest as it is; a -m of your own replaces the lane's.
# Tests read the benchmark data from ../shared/data (override with EVALKIT_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
lane=(-m "not slow")
args=()
for arg in "$@"; do
  if [[ $arg == --all ]]; then
    lane=()
  else
    args+=("$arg")
  fi
done
exec "$VENV/bin/python" -m pytest "${lane[@]}" "${args[@]}"
