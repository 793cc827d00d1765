"""The types every concern reads, at the bottom of the house: they import nothing of the product but
sandbox/models.py (the sandbox's own settings types).

- config.py: the settings of one run and of a night (RunConfig, LLMConfig, NightConfig, a night file's TaskSpec and
  RetentionConfig), with their defaults;
- effort.py: the reasoning effort's three words (its own module: `pack` must not build every settings model);
- environment.py: the `[environment]` table's type, which a RunConfig carries;
- events.py: the run's typed events, one transcript line each;
- model.py: the chat model's protocol, a turn and its tool calls, the failures the loop acts on;
- nights.py: a night file's tasks across nights: the task record, a night's plan;
- records.py: summary.json (a task's and the run's outcome, the gate's evidence, the environment record, a named
  night's fates since last night and what its gc removed);
- stats.py: the numbers of a request and of a run (per-request stats, speculative-decoding counters, summaries).
"""
