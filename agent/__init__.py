"""refactor-agent: overnight whole-repository refactoring with a local llama-server. Each concern is a package;
the types every concern reads are at the bottom (protocol/), and run/compose.py builds a run from its parts.

- __main__.py: `refactor-agent` and `python -m agent` (`pack` starts with its own modules only);
- cli.py: the command table, mounting each concern's cli.py;
- commands.py: the command line's conventions: exit codes, UsageProblem, one-line errors;
- loop.py: the agent loop: ask the model, run its tool calls, append, repeat;
- conversation/: the conversation within the server's window: its size, compaction instead of overflow;
- prompt.py: the system prompt (the packed repository) and the task prompt;
- protocol/: the types every concern reads (settings, events, records, stats, the chat model's protocol);
- settings/: what the user sets: one option table, its layers, the night file, durations;
- run/: one night: the commands, the composer, the Run and its task pipeline (stages/), locks, signals, limits;
- dispatch/: where tasks run: in order, over a fleet of servers, on Ray's nodes;
- nights/: a night file's tasks across nights: who they are, what became of them, what each night does;
- server/: everything about llama-server: binary, presets, launcher, its API, the chat client, doctor;
- record/: what a run leaves and shows: journal, progress for resume, metrics, report, live view;
- worktree/: host-side git that trusts nothing: safe git, the task's workspace, leftovers;
- safety/: text we did not write made harmless where it goes, and private folders;
- packing/: the repository packed into the model's context;
- environment/: the repository's own environment in the sandbox;
- gate/: the verification gate, and which command runs the repository's tests;
- review/: the night's runs and branches for the person at breakfast;
- retention/: the bounds of what grows every night, and `gc`, which applies them;
- eval/: a suite of refactoring tasks run and scored;
- bundle/: everything an install needs behind an air gap.
"""
