"""The one-line failure of a night's planning (exit 2): no default branch, a record of a newer version."""


class NightError(Exception):
    """str() is the one line the user sees."""
