"""One night: the `run`, `night` and `resume` commands' work from preflight to exit code, the one composer of a
Run, its records and its tasks' pipeline, the locks, stop signals and time limits that hold while it runs, and its
schedule.

- cli.py: `run`, `night` and `resume`: the night's settings from the layers, checked before anything is created;
- command.py: a run wired together: preflight, locks, journal, view, --on-finish; the exit code;
- compose.py: the one composer of a Run: every collaborator built and handed in;
- run.py: the Run: the night's tasks through their stages, its summary and records;
- sandboxes.py: where tasks run their commands: the Sandboxes protocol and its Docker implementation;
- stages/: one task as a pipeline: workspace, sandbox, baseline, loop, gate and its repairs, settle;
- preflight.py: the checks before anything is created (repositories, sandboxes and images, servers);
- lock.py: one run at a time per repository;
- interrupt.py: SIGINT, SIGTERM and SIGHUP stop a run the same way;
- time_limit.py: the night's deadline and a task's time limit, in any thread;
- schedule.py: `schedule install/list/remove`: the night from cron or a systemd timer.
"""
