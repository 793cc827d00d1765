"""The tests' doubles and fixtures, imported as `support.x` (tests/conftest.py puts tests/ on sys.path).

- scripted_server.py: an OpenAI-compatible server that plays scripted replies and streams like llama-server;
- scripted_model.py: the same replies as an in-process ChatModel, and a run of the pipeline with it;
- local_sandbox.py: sandboxes without Docker: commands as host subprocesses in the worktree;
- pytest_zygote.py, zygote_client.c, zygote_client.py: their `python3 -m pytest`, forked from a server that
  imported pytest once (the client compiled, or the interpreter's where no C compiler is there);
- helper_zygote.py: their file and symbol tools' `python3 -I -c`, forked from a server that imported the helpers'
  modules once;
- zygote_server.py: what those two servers share: the requests, the forks, the client's state in a forked child;
- local_cli.py: the real CLI with those sandboxes, for tests that run it as a process (kill -9, resume), forked
  from a server that imported it once;
- cli_preload.py: what those forked CLIs would each import and compute again, done once in that server;
- cli_runs.py: the CLI as a process of its own, and what a run leaves;
- repos.py: sample git repositories;
- pack_repos.py: repositories for the packer's tests;
- environment_images.py: names for the environment images tests build;
- llama_fixtures.py: real llama-servers with the embedded model, one per session;
- install_fixtures.py: the wheel built from the source tree, installed into a fresh environment;
- early.py: session fixtures whose work starts as collection ends, in the background;
- background.py: the states tests start from (a night, a run), made as collection ends in a forked process;
- nights.py: a named night on a fixture repository, night after night, and the states of its first nights;
- namespaces.py: a loopback-only network namespace for tests that must not reach the network;
- dsml.py: DeepSeek V4's tool-call markup (DSML) as the model writes it, and the replies a played server plays;
- played_server.py: a real llama-server behind a loopback proxy that plays scripted replies through its parser;
- template_checks.py: whether each request exactly extends what the server's slot holds (the template tier).
"""
