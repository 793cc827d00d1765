"""What keeps text the product did not write harmless where it goes, and the user's data to the user: the
repository's and the model's words never become a control token, a terminal escape or Markdown structure.

- control_text.py: text that would read as the model's control tokens, kept text (packed files, tool results);
- printable.py: text made safe for a terminal (control characters shown, rich given Text, never markup);
- markdown.py: text made safe for report.md and a pull request body (escaped prose, fenced code, safe links);
- private_dirs.py: folders of the user's own data (run records, caches, saved prefixes), created 0700.
"""
