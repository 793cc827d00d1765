"""What a run leaves and shows: runs/<run-id>/ written as the run happens, read back for resume, rendered for the
morning, and the view of a person watching.

- journal.py: runs/<run-id>/: transcript.jsonl, summary.json, config, patch.diff, one flushed line per step;
- progress.py: what a stopped run had done, read back from its transcript (finished tasks, the one in flight);
- prune.py: which run records `gc` may remove, and their removal;
- metrics.py: a task's and the run's speculation, prompt-cache and latency metrics;
- report.py: report.md and report.html, what the person at breakfast opens first;
- reasons.py: why a task ended as it did, in one line (every view of a task that is not verified says it);
- live.py: the run's story as lines, with a panel of what happens now on a terminal; the end block's proof;
- json_view.py: the run's typed events as JSON lines on stdout (`--json`);
- atomic.py: a file replaced whole or not at all (write, fsync, rename), for records a kill must not tear;
- last_runs.py: where each repository's last runs wrote their records, remembered per user (`review` finds them);
- fallback_stream.py: a standard stream that carries on in output.log once its reader has gone.
"""
