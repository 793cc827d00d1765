"""`refactor-agent review`: the night's runs and branches for the person at breakfast.

Everything here reads the runs directory (summary.json, config.json, patch.diff) and the user's repository through
SafeGit; trials (rebases, the gate again) happen in scratch worktrees, never in the user's checkout.
"""
