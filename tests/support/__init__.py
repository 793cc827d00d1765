"""Test doubles and helpers shared by the test folders (imported as `support.x`; conftest puts tests/ on sys.path).

- dsml.py: DeepSeek V4's tool-call markup (DSML) as the model writes it, and the replies a played server plays.
- played_server.py: a real llama-server behind a loopback proxy that plays scripted replies through its parser.
- template_checks.py: whether each request exactly extends what the server's slot holds (the template tier).
"""
