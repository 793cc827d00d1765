#!/usr/bin/env bash
# On a connected machine where scripts/setup.sh ran: everything an air-gapped install needs, written into DIR.
#   bash scripts/bundle.sh DIR [--llama-wheel FILE] [--image IMAGE]...      (refactor-agent bundle --help)
# Carry DIR over; there `bash DIR/install.sh` installs it with no index and no network.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${VENV:-$root/.venv}"
if [[ ! -x "$VENV/bin/refactor-agent" ]]; then
    echo "bundle: error: $VENV/bin/refactor-agent not found: run scripts/setup.sh first (or set VENV)" >&2
    exit 2
fi
# No cd: DIR is relative to where this was run.
exec "$VENV/bin/refactor-agent" bundle "$@"
