#!/usr/bin/env bash
# Installs refactor-agent from this folder alone, with no index and no network:   bash install.sh [VENV]
# VENV is the virtual environment to create (default: ./venv beside this script); PYTHON names the python3 to use
# (default: python3). First it checks, one line each, that this machine can take the bundle (manifest.json says
# what it was made for); then install.py (standard library only) installs, one line per step, the rest in a log.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
refuse() {
    echo "install: error: $*" >&2
    exit 2
}

command -v "$python" >/dev/null || refuse "$python not found: install python3 (the bundle's minor version) or set PYTHON"
# Any python3 reads the manifest; only the bundle's minor version can use its wheels.
made_for=$("$python" -c 'import json, sys; m = json.load(open(sys.argv[1])); print(m["machine"], m["python"])' \
    "$here/manifest.json" 2>/dev/null) || refuse "$here/manifest.json cannot be read: carry the whole bundle folder"
read -r machine python_version <<<"$made_for"
# install.py numbers the later steps of the same count.
echo "install 1/6: this machine, against what the bundle was made for ($machine, Python $python_version)"

here_machine=$(uname -m)
[[ "$here_machine" == "$machine" ]] \
    || refuse "this machine is $here_machine: the bundle's wheels and images are for $machine"
echo "  architecture $here_machine: the bundle's"

here_python=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ "$here_python" == "$python_version" ]] \
    || refuse "$python is Python $here_python: the bundle's wheels are for Python $python_version (set PYTHON=python$python_version)"
echo "  Python $here_python ($(command -v "$python")): the bundle's"

release=$(. /etc/os-release 2>/dev/null && echo "${ID:-} ${ID_LIKE:-}|${PRETTY_NAME:-${ID:-}}") || release="|"
system="${release#*|}"
[[ " ${release%%|*} " =~ \ (debian|ubuntu)\  ]] \
    || refuse "${system:-this system} is not of Debian's family (Debian, Ubuntu): the bundle's llama-server and images are made on Debian"
echo "  $system: Debian's family"

command -v docker >/dev/null || refuse "docker not found: install Debian's docker.io and start dockerd, then run install.sh again"
answer=$(timeout 60 docker version --format '{{.Server.Version}}' 2>&1) \
    || refuse "Docker does not answer ($(head -n 1 <<<"$answer")): start dockerd, then run install.sh again"
echo "  Docker $answer answers"

exec "$python" "$here/install.py" "$@"
