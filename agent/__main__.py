from agent.cli import app

app(prog_name="refactor-agent")
