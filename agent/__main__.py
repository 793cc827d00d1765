"""`refactor-agent` and `python -m agent`: `pack` starts with its own modules only, everything else with all."""

import sys


def main() -> None:
    if sys.argv[1:2] == ["pack"]:
        # lazy: `pack` runs once per task and is timed per run (issue 14 §5: warm < 1 s): the whole command set
        # imports git, the review and the sandbox's modules, 0.4 s of start-up that `pack` never uses.
        from agent.commands import CommandGroup
        from agent.packing.cli import pack

        command = CommandGroup("Pack a repository into one text.")
        command.command()(pack)
        command(args=sys.argv[2:], prog_name="refactor-agent pack")
    else:
        # lazy: the whole command table, which `pack` never loads
        from agent.cli import app

        app(prog_name="refactor-agent")


if __name__ == "__main__":
    main()
