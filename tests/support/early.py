"""Session fixtures whose work starts as collection ends, on the second core, while the serial session runs the
tests before theirs; the fixture waits for the result when a test first asks for it.

`@started_early` turns `start()` into such a fixture, named as the function: start() runs in the collection hook
when a selected test needs the fixture (else when the fixture is first asked for), begins the work (processes, a
thread) and returns a function that waits for its result. It takes what it needs from the session as it starts
(the environment, the source tree) and works in folders of its own, so the tests run meanwhile cannot change
what it does, nor it what they see. Nothing starts for --collect-only. Its processes run under BACKGROUND (`nice`):
the session's own processes keep their core, the early work takes what the session leaves idle.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

Result = TypeVar("Result")

BACKGROUND = ("nice", "-n", "10")  # a command's prefix: at a lower priority than the session's processes

_STARTS: dict[str, Callable[[], Callable[[], Any]]] = {}
_WAITS: dict[str, Callable[[], Any]] = {}


def started_early(start: Callable[[], Callable[[], Result]]) -> Any:
    name = start.__name__
    assert name not in _STARTS, f"two early fixtures named {name}: the collection hook finds them by name"
    _STARTS[name] = start

    @pytest.fixture(scope="session", name=name)
    def fixture() -> Result:
        return _waiter(name)()

    return fixture


def early_fixtures() -> set[str]:
    """The names of the early fixtures (tests/conftest.py runs the modules that use them last)."""
    return set(_STARTS)


def _waiter(name: str) -> Callable[[], Any]:
    if name not in _WAITS:
        _WAITS[name] = functools.cache(_STARTS[name]())
    return _WAITS[name]


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    for name in sorted(_STARTS.keys() & wanted):
        _waiter(name)
