"""Host-side git that trusts nothing the repository holds: every git call, the task's worktree and branch, and what
killed runs leave behind.

- safe_git.py: git run with the repository's hooks, config-driven programs and fsmonitor off, bounded output;
- workspace.py: a task's worktree on its own branch: its diff, commit with trailers, snapshots for resume;
- leftovers.py: the run's scratch directories, and those of runs that did not finish (swept at the next start).
"""
