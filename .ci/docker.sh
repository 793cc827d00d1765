#!/usr/bin/env bash
# Makes Docker usable for the sandbox tests: installs the daemon and debootstrap when missing, starts the
# daemon when it does not answer, and builds the sandbox image when it is absent. Safe to run again.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
IMAGE="refactor-agent-sandbox:latest"
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
DOCKERD_WAIT_S=60

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    echo "docker.sh: installing docker.io and debootstrap"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io debootstrap
fi

if ! docker info >/dev/null 2>&1; then
    echo "docker.sh: starting dockerd (log: $DOCKERD_LOG)"
    # No bridge: sandbox containers use network_mode=none, so nothing in them can reach out anyway.
    setsid dockerd --bridge=none --iptables=false >"$DOCKERD_LOG" 2>&1 < /dev/null &
    waited=0
    until docker info >/dev/null 2>&1; do
        if (( waited >= DOCKERD_WAIT_S )); then
            echo "docker.sh: dockerd did not answer within ${DOCKERD_WAIT_S}s; last lines of its log:" >&2
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "docker.sh: dockerd answers after ${waited}s"
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "docker.sh: building $IMAGE with debootstrap (3 to 9 minutes)"
    "$PYTHON" -c 'from sandbox.image import build_image; build_image(bootstrap=True)'
fi
echo "docker.sh: docker and $IMAGE are ready"
