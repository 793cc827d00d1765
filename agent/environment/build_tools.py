"""A C compiler and Python's headers for the build stage only: for a project that compiles extensions, or a
dependency with no wheel for the base's Python. They come from the base's own Debian mirror (through the
egress proxy) and every package they brought is purged before the image is committed, so the image the model
works in has no compiler."""

from __future__ import annotations

import re

from agent.environment.plan import SetupStep

PACKAGES = ("gcc", "libc6-dev", "python3-dev")
# The packages the tools brought (dpkg's list before and after): what is purged at the end.
ADDED = "/tmp/refactor-agent-build-tools"
LISTED = "dpkg-query -W -f '${Package}\\n' | sort"
# What a failed install prints when something needed a compiler or Python's headers.
NEEDS_COMPILER = r"gcc|cc1|Python\.h|compiler|command 'cc'|unable to execute|x86_64-linux-gnu-gcc|build_ext"
# A project that compiles its own extensions: known before anything runs.
_COMPILES = re.compile(r"\bExtension\(|ext_modules|cythonize|scikit[-_]build|mesonpy|meson-python|pybind11")

# Installs them once (a no-op when they are there), noting what they brought.
INSTALL = (
    f"[ -e {ADDED} ] || {{ {LISTED} > {ADDED}.before && apt-get update -qq && "
    f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {' '.join(PACKAGES)} && "
    f"{LISTED} | comm -13 {ADDED}.before - > {ADDED}; }}"
)


def compiles(*texts: str) -> bool:
    return any(_COMPILES.search(text) for text in texts)


def install_step() -> SetupStep:
    """Not fatal: without a network (a wheelhouse build) or a mirror, what needs compiling fails on its own."""
    failed = "printf '%s\\n' '==> refactor-agent: the C build tools could not be installed'"
    return SetupStep(name="python: C build tools, for the build only", command=f"{INSTALL} || {failed}")


def remove_step() -> SetupStep:
    command = f"if [ -s {ADDED} ]; then apt-get purge -y -qq $(cat {ADDED}) && rm -rf /var/lib/apt/lists/*; fi"
    return SetupStep(name="python: the C build tools removed", command=command)
