"""Everything about llama-server: finding and starting it, speaking to it (the chat stream and its own
endpoints), what it keeps for us (saved prefixes, slots) and whether it is ready.

- binary.py: locating llama-server and the embedded SmolLM2 model, and what the binary supports;
- presets.py: every llama-server flag the product relies on, spelled out once;
- launcher.py: starting, stopping and listing servers, each with a state file;
- ensure.py: the server a run talks to: the configured one, or the embedded preset started on its port;
- paths.py: where launcher state files and saved KV caches live;
- api.py: llama-server's own endpoints (/health, /props, /slots, /tokenize, /apply-template, /metrics);
- chat.py: the chat model on the OpenAI-compatible endpoint, streamed, its failures sorted, retried;
- metrics.py: /metrics and /slots read for the report (speculative-decoding counters);
- rendering.py: a request's prompt tokens through the server's template, and the prefix tasks on one system
  message share;
- kv_cache.py: saved KV caches of task prefixes, restored for every later task that starts alike;
- kv_store.py: the save directory: slot files, their token lists and layouts, what restores gave, eviction;
- slot_lock.py: a slot of a shared server for one process;
- errors.py: the failures a user can cause or meet, one line each;
- doctor.py: `doctor`: is this machine ready for an overnight run;
- doctor_target.py: doctor against the target model: its chat template, thinking, an exact extension's reuse;
- cli.py: `server start|stop|status` and `doctor`.
"""
