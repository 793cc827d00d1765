"""A repository's devcontainer.json and Dockerfile, read on the host: bounded, linear, never interpreted; what they
may build on and fetch decided before any build starts."""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.environment.devcontainer import parse_devcontainer, strip_jsonc


def _fastest(work: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def test_devcontainer_json_is_read_in_linear_time() -> None:
    """Unterminated strings full of escapes, unterminated comments, commas before long blanks: 4x the input may
    take about 4x the time, never the 16x of a quadratic scan (issue 18: 128 KB took 135 s)."""
    shapes = {
        "escapes": lambda n: '"\\' * n,
        "comments": lambda n: "/*" * n,
        "commas": lambda n: ("," + " " * 40) * (n // 20),
        "nested": lambda n: '{"a": [' * (n // 8) + "//x\n" * (n // 8),
    }
    for name, shape in shapes.items():
        small, large = shape(4000), shape(16000)
        ratio = _fastest(lambda text=large: strip_jsonc(text)) / _fastest(lambda text=small: strip_jsonc(text))
        assert ratio < 8, f"{name}: 4x the input took {ratio:.1f}x the time"


def test_jsonc_keeps_strings_and_drops_comments_and_trailing_commas() -> None:
    text = (
        '{\n // a comment\n "image": "x//y /* not a comment */", /* block */\n'
        ' "containerEnv": {"A": "1", "B": "say \\"hi\\" // still text",},\n'
        ' "forwardPorts": [1, 2, /* gone */ ],\n}\n'
    )
    config = parse_devcontainer(text, "devcontainer.json")
    assert config.image == "x//y /* not a comment */"
    assert config.containerEnv == {"A": "1", "B": 'say "hi" // still text'}
    assert strip_jsonc("[1, // end\n]").replace(" ", "").replace("\n", "") == "[1]"
