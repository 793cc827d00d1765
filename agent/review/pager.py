"""The pager `review show` uses on a terminal, as git does it: $PAGER, else `less`, with LESS=FRX unless the user
set LESS (colours shown, output that fits on one screen printed without paging). pydoc's pager, rich's default,
runs `less` without -R and shows the colours as escape codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from rich.pager import Pager

DEFAULT_LESS = "FRX"


class TerminalPager(Pager):
    def show(self, content: str) -> None:
        command = os.environ.get("PAGER") or ("less" if shutil.which("less") else "")
        if not command or command == "cat":
            sys.stdout.write(content)
            return
        environment = {**os.environ, "LESS": os.environ.get("LESS", DEFAULT_LESS)}
        try:
            # The user's own PAGER, run as git runs it: a shell command line.
            subprocess.run(command, shell=True, input=content, text=True, env=environment, check=False)
        except OSError:
            sys.stdout.write(content)
