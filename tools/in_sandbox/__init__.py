"""The scripts that run inside the task's container, stdlib-only (the symbol helper adds rope and tree-sitter from
read-only mounts): this folder is all of the product the sandbox sees.

- fileops_helper.py: the file tools' work (view, replace, create, search), confined to /workspace, no link followed;
- symbols_helper.py: the symbol tools' work (find, rename, move) and the state ledger, on the same confinement.
"""
