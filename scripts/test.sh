#!/usr/bin/env bash
# The test command: sets up what the tests need (scripts/setup.sh), then runs every test, the ones that
# need Docker and a real llama-server included (markers `docker`, `llama_server`: run, never skipped).
set -euo pipefail

cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/pytest "$@"
