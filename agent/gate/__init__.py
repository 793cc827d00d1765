"""The verification gate: the task's tests before the model's first turn and after its last, compared.

A branch arrives with evidence: which tests passed at baseline, which pass now, which regressed, which were
fixed, which are flaky. Nothing here runs on the host: the suite runs in the task's sandbox, and only its report
(a JUnit XML file or the runner's own summary line) comes back to be parsed.
"""
