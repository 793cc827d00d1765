"""A task's stages around the loop, in the order the runner (agent/run/run.py) runs them:

- workspace (workspace.py): the task's worktree and branch, new or reopened from its last snapshot on resume;
- baseline: the suite before any change, in the sandbox, while the repository is packed (agent/gate/);
- loop: the model and its tools (agent/loop.py), which knows nothing of git, tests or files;
- gate (gate.py): the finished work checked against the baseline, regressions sent back for repair rounds;
- settle (settle.py): the verdict, the commit with its trailers, the patch in the run's records.

Each is a module of plain functions over explicit arguments, so one can be replaced without touching the others.
"""
