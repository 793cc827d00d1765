"""`refactor-agent review`: the night's runs and branches for the person at breakfast.

Everything here reads the runs directory (summary.json, config.json, patch.diff) and the user's repository through
SafeGit; trials (rebases, the gate again) happen in scratch worktrees, never in the user's checkout.

- cli.py: `review`, `review RUN`, `review show|merge|discard|pr|rebase|fates`;
- records.py: the runs directory as review reads it;
- change.py: one task's change: its message and diff;
- views.py: what review prints, and the same as JSON;
- pager.py: the pager on a terminal, as git uses it;
- repository.py: the ref changes review makes in the user's repository;
- pull_request.py: a pull-request description in Markdown;
- push.py: `review push`: a night's branch with a lease on the tip last pushed, and the push recorded;
- branch_state.py: where a task's branch stands now (present, pushed, merged, deleted, moved outside, moved on by a
  later night);
- rebase.py: `review rebase`: verified branches replayed onto another commit, the gate run again.
"""
