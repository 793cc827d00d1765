#!/usr/bin/env bash
# The test command: sets up what the tests need (scripts/setup.sh), then runs every test, the ones that
# need Docker, a real llama-server and a local Ray cluster included (markers `docker`, `llama_server`, `ray`:
# run, never skipped).
set -euo pipefail

cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Ray is an optional extra for users (`--executor ray`); the tests run the Ray executor on a local cluster.
echo "test: installing the ray extra"
.venv/bin/python -m pip install --quiet -e ".[dev,ray]"
# The morning report is checked as a person sees it, in a real headless browser: Debian's chromium.
if ! command -v chromium >/dev/null; then
    echo "test: installing chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/pytest "$@"
