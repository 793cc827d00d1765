"""Retention: the bounds of what grows every night (run records, resume snapshots, scratch directories, baselines,
saved prefixes) and `refactor-agent gc`, which applies them through each store's own prune function.

- plan.py: what each store would remove under the bounds, removed (unless a dry run), and what stayed and why;
- cli.py: `refactor-agent gc`: the bounds from the command line, one line per thing removed or kept.
"""
