"""One task as a pipeline of stages, in the order pipeline.py runs them: workspace, then in its sandbox the baseline
(while the repository is packed), the loop, the gate and its repair rounds, then settle.

- pipeline.py: the order of the stages and the one policy for what stops a task (timed_out, interrupted, failed);
- task.py: the task's own state while it runs (TaskContext): its events, its wip snapshot after each tool result;
- workspace.py: the task's worktree and branch, new or reopened from its last snapshot on resume;
- sandbox.py: the task's sandbox, the tools' context in it and the gate;
- baseline.py: the suite before any change, in the sandbox, while the host packs the repository;
- commands.py: the task's `before` and `after` commands in its sandbox (a codemod, a formatter);
- loop.py: the agent loop (agent/loop.py, which knows nothing of git, tests or files) with the run's tools;
- compactor.py: the loop's compactor, which keeps the conversation within the task's server's window;
- gate.py: the finished work checked against the baseline, regressions sent back for repair rounds;
- settle.py: the verdict, the commit with its trailers, the patch in the run's records;
- refresh.py: a branch replayed onto a new base and gated there without the model (`review rebase`, a stale night task).

Each is a module of plain functions over explicit arguments, so one can be replaced without touching the others.
"""
