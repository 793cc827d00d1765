"""A repository's devcontainer.json and Dockerfile, read on the host: bounded, linear, never interpreted; what they
may build on and fetch decided before any build starts."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agent.environment.devcontainer import parse_devcontainer, strip_jsonc
from agent.environment.dockerfile import DockerfileError, base_images


def _fastest(work: Callable[[], object], repeat: int = 5) -> float:
    """The least CPU time of this thread `work` took: on a loaded machine wall time counts the waits for a core
    too, which a small input that fits in one time slice is spared and a larger one is not (30x for 8x at load 14)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best


def test_devcontainer_json_is_read_in_linear_time() -> None:
    """Unterminated strings full of escapes, unterminated comments, commas before long blanks: 8x the input may
    take about 8x the time, never the 64x of a quadratic scan (issue 18: 128 KB took 135 s). The wide gap keeps
    the check true on a loaded machine."""
    shapes = {
        "escapes": lambda n: '"\\' * n,
        "comments": lambda n: "/*" * n,
        "commas": lambda n: ("," + " " * 40) * (n // 20),
        "nested": lambda n: '{"a": [' * (n // 8) + "//x\n" * (n // 8),
    }
    for name, shape in shapes.items():
        small, large = shape(4000), shape(32000)
        ratio = _fastest(lambda text=large: strip_jsonc(text)) / _fastest(lambda text=small: strip_jsonc(text))
        assert ratio < 24, f"{name}: 8x the input took {ratio:.1f}x the time"


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


SANDBOX = "refactor-agent-sandbox:latest"


@pytest.mark.parametrize(
    ("dockerfile", "refusal"),
    [
        ("FROM x\nADD http://127.0.0.1:8000/payload /payload\n", "Dockerfile:2: ADD of a URL or a git repository"),
        ('FROM x\nADD ["https://example.com/a", "/a"]\n', "Dockerfile:2: ADD of a URL or a git repository"),
        ("FROM x\nadd HTTP://example.com/a /a\n", "Dockerfile:2: ADD of a URL or a git repository"),
        ("FROM x\nADD git@example.com:team/tools /tools\n", "Dockerfile:2: ADD of a URL or a git repository"),
        ("FROM x\nONBUILD ADD https://example.com/a /a\n", "Dockerfile:2: ADD of a URL or a git repository"),
        ("FROM x\nARG SOURCE=https://example.com/a\nADD $SOURCE /a\n", "Dockerfile:3: ADD with a variable"),
        # Under an escape directive both readings are checked: neither may hide an ADD.
        ("# escape=`\nFROM x\nRUN echo \\\nADD http://example.com/ /y\n", "Dockerfile:4: ADD of a URL"),
        ("# escape=`\nFROM x\nRUN echo `\nADD http://example.com/ /y\n", "Dockerfile:4: ADD of a URL"),
        ("ARG BASE\nFROM ${BASE:-evil.example/x}\n", "Dockerfile:2: FROM ${BASE:-evil.example/x}: only plain"),
        ('FROM "x"\n', 'Dockerfile:1: FROM "x": only plain'),
        ("FROM x\nCOPY --from=$TOOLS /a /a\n", "Dockerfile:2: COPY --from=$TOOLS: only a stage name"),
        ("RUN true\n", "Dockerfile: no FROM instruction"),
        ("FROM x\n" + "RUN true\n" * 40_000, "Dockerfile: larger than 256 KiB"),
    ],
)
def test_a_dockerfile_that_would_make_the_daemon_fetch_is_refused_with_its_line(dockerfile: str, refusal: str) -> None:
    with pytest.raises(DockerfileError) as refused:
        base_images(dockerfile, "Dockerfile", {})
    assert str(refused.value).startswith(refusal)


def test_a_dockerfiles_bases_are_its_from_and_copy_from_images_with_args_as_docker_reads_them() -> None:
    dockerfile = (
        "\ufeff# syntax=docker/dockerfile:1\n"
        "ARG VARIANT=3.11\nARG BASE\n"
        "FROM --platform=linux/amd64 python:${VARIANT}-slim AS Build\n"
        "RUN echo one \\\n  # a comment inside the continuation\n\n  ADD http://example.com/ /not-an-instruction\n"
        "FROM build\nCOPY --from=build /a /a\nCOPY --from=0 /a /b\nCOPY --from=team/tools:2 /t /t\n"
        "FROM $BASE\nFROM scratch\nADD local.tar.gz /\nCOPY . /workspace\n"
    )
    images = base_images(dockerfile, "Dockerfile", {"VARIANT": "3.12", "UNDECLARED": "x", "BASE": SANDBOX})
    assert images == ["python:3.12-slim", "team/tools:2", SANDBOX]
    assert base_images("FROM $UNDECLARED\n", "Dockerfile", {"UNDECLARED": SANDBOX}) == [""], "as Docker: unset"


def test_reading_a_dockerfile_is_linear_in_its_size() -> None:
    def shape(lines: int) -> str:
        return "FROM x\n" + "RUN a \\\n" * lines + "RUN b\n" + "COPY --from=x " + "a " * lines + "/b\n"

    small, large = shape(2000), shape(16000)
    ratio = _fastest(lambda: base_images(large, "Dockerfile", {})) / _fastest(
        lambda: base_images(small, "Dockerfile", {})
    )
    assert ratio < 24, f"8x the Dockerfile took {ratio:.1f}x the time (a quadratic read: 64x)"
