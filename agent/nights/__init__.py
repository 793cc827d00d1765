"""A night file's tasks across nights: who they are, what became of them, what each night does with them.

- identity.py: a task's key, its settings' fingerprint, the record's name for a repository, branch allocation;
- kinds.py: the kind of a task (rename, move, API migration ...) for the merge rate per kind;
- default_branch.py: the branch a night starts from, read without fetching;
- merged.py: whether a task's branch is in the default branch (ancestor, trailer, same patch, contained);
- history.py: earlier results on private refs refs/refactor-agent/history/...;
- errors.py: the one-line failure of a night's planning;
- record.py: the task record (runs/.tasks/<repository>.json) under its locks, pending moves settled;
- claim.py: one night file per night name on a repository (a moved or renamed file takes it over);
- rebuild.py: the record rebuilt from the branches' trailers when it is missing or does not parse;
- publish.py: ref moves as one transaction, written ahead to the record;
- predicates.py: a [[repo]]'s if_path_exists / if_contains, read from the default branch's objects;
- shards.py: a sharded task's shards (by directory, by CODEOWNERS) from the default branch's objects, and their scope;
- decide.py: the decision per task (a pure function of the facts), max_open over a task's shards;
- plan.py: the planning pass (a sharded task's shards each a task, max_open), the narrowed night, the plan's text;
- supersede.py: an earlier unfinished run of the night taken over by a new one (its work branches go);
- tonight.py: the planned tasks while the run works on them: their base, trailer and publish;
- fates.py: what became of the tasks: the report's "since last night", the merge rate per kind, `review fates`.
"""
