"""What the model may call: each tool's pydantic argument model is the JSON schema the model sees, and its work
runs in the task's sandbox.

- base.py: what every tool is made of (Executor, ToolContext, ToolResult, ToolSpec), importing no tool;
- registry.py: the tools the model sees, and the dispatch of its calls (nothing it sends crashes the run);
- shell.py: `bash` and `run_tests`;
- rpc.py: the sandbox's RPC: a JSON request to a helper in the container, its one reply line back;
- files.py: the file tools, their work done in the sandbox by in_sandbox/fileops_helper.py;
- symbols.py: find, rename and move a symbol, done by in_sandbox/symbols_helper.py;
- ledger.py: the state ledger after each edit, and the plan tools;
- finish.py: `finish`, the model's end of the task;
- output.py: a result capped to the tool output limit;
- in_sandbox/: the scripts that run inside the container.
"""
