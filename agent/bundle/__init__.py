"""An install that crosses an air gap: `refactor-agent bundle DIR` writes everything an install needs on a
connected machine, and the bundle's install.sh installs it from the folder alone on the far side.

- make.py: the bundle's steps (wheels, llama-server, the model, templates, images) and its preflight;
- manifest.py: manifest.json, what a bundle holds with each file's sha256;
- steps.py: one line per step on the terminal, the tools' output in a log;
- cli.py: the `bundle` command;
- install.py: the far side (the checks, then the install), copied into every bundle with install.sh.
"""
