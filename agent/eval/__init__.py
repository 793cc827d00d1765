"""`refactor-agent eval`: run a suite of refactoring tasks in RefactorBench's layout and score them.

- cli.py: the command: its own options, then the option table's options of a task's run;
- run.py: an eval wired together: preflight, then the tasks;
- harness.py: one task: a fresh repository, one run, then the task's test in a sandbox;
- suite.py: a suite in RefactorBench's layout, read as data;
- scripted.py: the models of `--oracle` and `--noop`;
- score.py: eval.json, the totals with their confidence interval, the report and --compare.
"""
