"""`python -m support.local_cli run|resume|night ...`: the real command line, its one difference that tasks run in
sandboxes on this machine (support/local_sandbox.py), for the tests that run the CLI as a process of its own
(signals, kill -9, resume) and do not test Docker."""

from __future__ import annotations

import sys

import agent.run.command
from agent.__main__ import main

from support.local_sandbox import LocalSandboxes

if __name__ == "__main__":
    agent.run.command.docker_sandboxes = LocalSandboxes  # the run's one seam for its sandboxes
    sys.argv[0] = "refactor-agent"
    main()
