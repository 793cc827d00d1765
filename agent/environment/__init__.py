"""The repository's own environment in the sandbox: where it comes from, built once per dependency change.

An environment is an image layered on the sandbox base, holding what the repository's tests need (its Python
packages, node modules, ...) and nothing of its source: the task container mounts the worktree at /workspace,
and the environment points the project's imports there. Builds may reach only the package indexes the user's
configuration names; task containers never have a network.

- stage.py: the environment as a stage of a run (and of `env build`): the image reused or built, tests collected;
- sources.py: where the environment comes from: the user's word over what the repository holds;
- spec.py: the `[environment]` table read from a file;
- plan.py: what a build does, decided on the host before anything runs, and its digest;
- detect.py: what a repository needs, found from its committed files (Python, Node, Go, Rust);
- committed.py: the repository as committed, read through git;
- python_sources.py: a Python project's dependencies as the union of everything the repository says;
- python_project.py: what a Python project's own metadata says;
- setup_py.py: what a project's `setup.py` says without running it;
- poetry.py: Poetry's and Pipenv's tables as requirements;
- requirements_files.py: pip requirements files, their includes followed inside the tree;
- test_tooling.py: what the repository's test tooling installs (tox deps, nox installs, CI pip lines);
- devcontainer.py: a `.devcontainer/devcontainer.json`;
- dockerfile.py: a devcontainer's Dockerfile, read on the host before Docker sees it;
- bases.py: which images a devcontainer may build on;
- build.py: building the image: the base, then the plan's steps;
- build_tools.py: a C compiler and Python's headers for the build stage only;
- generated_modules.py: modules the project's build writes into its own package;
- indexes.py: which package indexes a build may use;
- egress.py: the build's only way out: a CONNECT proxy to the configured indexes;
- wheelhouse.py: `env bundle`: a repository's environment carried across an air gap;
- cli.py: `env build|bundle|list|prune`.
"""
