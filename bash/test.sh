#!/usr/bin/env bash
# Runs evalkit's test suite (pytest) in the environment bash/setup.sh made.
#   bash bash/test.sh            the fast lane: every test not marked slow (-m "not slow")
#   bash bash/test.sh --all      every test (what .ci/run runs)
# Every other argument goes to pytest as it is; a -m of your own replaces the lane's.
# Tests run in 2 processes (pytest-xdist, --dist loadgroup: a file's tests in one process,
# the embedded model's tests in one; tests/conftest.py groups them). Most tests wait on a
# process they started, so one pytest process keeps a 2-core host about half busy.
# EVALKIT_TEST_WORKERS=N sets the count (0: pytest's own process only); a -n of yours wins.
# Each test file gets a line as it finishes ("[ 12/131 files, 03:41] tests/…py: 6 passed (4.2 s)",
# tests/support/progress.py); -v names every test instead, -q prints only the dots.
# Tests read the benchmark data from ../shared/data (override with EVALKIT_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
lane=(-m "not slow")
workers=(-n "${EVALKIT_TEST_WORKERS:-2}" --dist loadgroup)
args=()
for arg in "$@"; do
  case $arg in
    --all) lane=() ;;
    -n*|--numprocesses*) workers=(); args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
done
exec "$VENV/bin/python" -m pytest "${lane[@]}" "${workers[@]}" "${args[@]}"
