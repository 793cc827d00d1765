"""The verification gate: the task's tests before the model's first turn and after its last, compared.

A branch arrives with evidence: which tests passed at baseline, which pass now, which regressed, which were
fixed, which are flaky. Nothing here runs on the host: the suite runs in the task's sandbox, and only its report
(a JUnit XML file or the runner's own summary line) comes back to be parsed.

- stage.py: the gate as a stage of a task: the baseline before the first turn, the check after the last;
- suite.py: running the repository's suite in the task's sandbox, and reading back what it reported;
- results.py: one run of a suite, reduced to per-test outcomes and counts;
- unittest_output.py: per-test outcomes from unittest's verbose output;
- compare.py: baseline against after: broken, fixed, unchanged;
- syntax.py: the cheap static check: a changed file must still parse;
- infrastructure.py: the files a test command reads besides the tests;
- reading.py: the files a check reads, as (path, side) pairs read many at once from the workspace's git blobs;
- verdict.py: the verdict, the repair message, the commit trailers;
- baseline.py: baselines kept per base commit, test command and image;
- test_command.py: which command runs the repository's tests, and why;
- test_command_sources.py: where the repository says how it runs its tests (tox, nox, Makefile, CI);
- runner_line.py: one line of those instructions as a command the gate can run;
- tooling_files.py: tox's, nox's and CI's files read as data, bounded, for this detection and the environment's.
"""
