#!/usr/bin/env bash
# The test command: sets up what the tests need (scripts/setup.sh), then runs every test, the ones that
# need Docker, a real llama-server, a browser and a local Ray cluster included (markers `docker`,
# `llama_server`, `browser`, `bootstrap`, `ray`, and the slower `killed` and `wheel`: run, never skipped).
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
# The set-up promises one line per step on the terminal: a line of anything else (a tool's warning that
# escaped the log) fails the tests here.
setup_out=$(mktemp)
bash scripts/setup.sh | tee "$setup_out"
if grep -Ev '^setup( [0-9]+/[0-9]+)?: ' "$setup_out"; then
    echo "test: error: scripts/setup.sh printed the lines above besides its one line per step" >&2
    exit 1
fi
# One line per step and the closing line, nothing more.
steps=$(grep -cE '^setup [0-9]+/[0-9]+: ' "$setup_out")
if (( $(wc -l <"$setup_out") > steps + 1 )); then
    echo "test: error: scripts/setup.sh printed more than one line per step:" >&2
    cat "$setup_out" >&2
    exit 1
fi
rm -f "$setup_out"
LOG="$VENV/setup.log"
# Ray is an optional extra for users (`--executor ray`); the tests run the Ray executor on a local cluster.
echo "test 1/3: the ray extra (log: $LOG)"
"$VENV/bin/python" -m pip install --quiet -e ".[dev,ray]" >>"$LOG" 2>&1
# The morning report is checked as a person sees it, in a real headless browser: Debian's chromium. The schedule
# tests check the systemd units with systemd's own parser (systemd-analyze verify; nothing is started).
echo "test 2/3: chromium and systemd-analyze (Debian's packages)"
if ! command -v chromium >/dev/null || ! command -v systemd-analyze >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium systemd; } >>"$LOG" 2>&1
fi
echo "test 3/3: ruff and every test"
"$VENV/bin/ruff" check .
"$VENV/bin/pytest" "$@"
