"""The conversation's window: how many tokens the next request takes against the server's context, and the
compaction that keeps it under the threshold instead of failing the task.

- window.py: ContextWindow: the threshold, the next request's size from what the server reported for the last one,
  the server's exact count near the threshold;
- compaction.py: the pure transforms: older tool results stubbed, older reasoning dropped, the summary's history;
- compactor.py: Compactor, which the loop asks before each request and after an overflow: stubs first, then a
  handoff summary from the model, recorded as a `compaction` event.
"""
