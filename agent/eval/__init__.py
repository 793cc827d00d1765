"""`refactor-agent eval`: run a suite of refactoring tasks in RefactorBench's layout and score them."""
