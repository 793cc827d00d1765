"""One night: the `run`, `night` and `resume` commands' work from preflight to exit code, the run's records and
its tasks' pipeline, the locks, stop signals and time limits that hold while it runs, and its schedule.

- command.py: a run wired together: preflight, locks, journal, model, view, --on-finish; the exit code;
- run.py: the Run: the night's tasks through their stages, its summary and records;
- stages/: one task as a pipeline: workspace, baseline, loop, gate and its repairs, settle;
- preflight.py: the checks before anything is created (repositories, Docker and images, servers);
- lock.py: one run at a time per repository;
- interrupt.py: SIGINT, SIGTERM and SIGHUP stop a run the same way;
- time_limit.py: the night's deadline and a task's time limit, in any thread;
- schedule.py: `schedule install/remove/show`: the night from cron or a systemd timer.
"""
