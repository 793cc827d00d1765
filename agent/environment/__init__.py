"""The repository's own environment in the sandbox: where it comes from, built once per dependency change.

An environment is an image layered on the sandbox base, holding what the repository's tests need (its Python
packages, node modules, ...) and nothing of its source: the task container mounts the worktree at /workspace,
and the environment points the project's imports there. Builds may reach only the package indexes the user's
configuration names; task containers never have a network.
"""
