"""refactor-agent: overnight whole-repository refactoring with a local llama-server."""
