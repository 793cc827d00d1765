"""A devcontainer's Dockerfile, read on the host before Docker sees it: the images it builds on, and a refusal for
what would make the Docker daemon itself reach a network. The daemon fetches `ADD <url>` and pulls a `FROM` or
`COPY --from` image that is not on the machine, over the host's network whatever the build's `network_mode`.

The text is split into instructions as Docker's parser splits it: lines end at `\\n`, a line ending in the escape
character goes on, comment and blank lines inside a continuation are dropped, the first word is the instruction,
ONBUILD holds another. When an escape directive may be there, both escape characters are tried, so that no
reading of the directives hides an instruction. Nothing is run or looked up; the only substitution is a plain
`$NAME`/`${NAME}` in FROM, from the ARGs declared before the first FROM and the devcontainer's `build.args`, as
Docker does; any other form of variable where the daemon would resolve an image or a source is refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Real devcontainer Dockerfiles are a few KB; the scan is linear, the cap keeps even that small.
MAX_DOCKERFILE_BYTES = 256 * 1024
DEFAULT_ESCAPE, OTHER_ESCAPE = "\\", "`"
# Docker's own split between an instruction's words.
_WHITESPACE = re.compile(r"[\t\v\f\r ]+")
_ESCAPE_DIRECTIVE = re.compile(r"^\s*#\s*escape\s*=", re.IGNORECASE | re.MULTILINE)
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_REMOTE_SOURCE = re.compile(r"://|(?:^|[\s\"'\[,])git@", re.IGNORECASE)
NO_STAGE_IMAGE = "scratch"
# Quotes, escapes and variables: what Docker's shell lexer would interpret, and this reader does not.
UNREAD_MARKS = "$\"'\\`"


class DockerfileError(Exception):
    """str() is the one line the user sees."""


@dataclass(frozen=True)
class Instruction:
    keyword: str  # lower case, as Docker dispatches on it
    arguments: str
    line: int  # 1-based, where it starts


def _continued(line: str, escape: str) -> tuple[str, bool]:
    """The line without its continuation mark, and whether the instruction ends here."""
    stripped = line.rstrip(" \t")
    if stripped.endswith(escape):
        return stripped[: -len(escape)], False
    return line, True


def _instructions(logical: str, line: int) -> list[Instruction]:
    words = _WHITESPACE.split(logical.strip(), maxsplit=1)
    instruction = Instruction(words[0].lower(), words[1] if len(words) > 1 else "", line)
    if instruction.keyword == "onbuild" and instruction.arguments:
        return [instruction, *_instructions(instruction.arguments, line)]
    return [instruction]


def split_instructions(text: str, escape: str = DEFAULT_ESCAPE) -> list[Instruction]:
    lines = text.split("\n")
    lines[0] = lines[0].removeprefix("\ufeff")
    found: list[Instruction] = []
    index = 0
    while index < len(lines):
        start, first = index + 1, lines[index].removesuffix("\r").lstrip()
        index += 1
        if not first or first.startswith("#"):
            continue
        piece, ends = _continued(first, escape)
        pieces = [piece]
        while not ends and index < len(lines):
            raw = lines[index].removesuffix("\r")
            index += 1
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            piece, ends = _continued(raw, escape)
            pieces.append(piece)
        found += _instructions("".join(pieces), start)
    return found


def _flags(arguments: str) -> tuple[dict[str, str], list[str]]:
    """`--name=value` words before the first other word, and the words after them."""
    words = _WHITESPACE.split(arguments.strip()) if arguments.strip() else []
    flags: dict[str, str] = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        flags[name.lower()] = value
    return flags, words


def _sources(words: list[str]) -> list[str]:
    """ADD's sources: every path but the destination, in the JSON form or as words."""
    if words and words[0].startswith("["):
        try:
            listed = json.loads(" ".join(words))
        except ValueError:
            listed = None
        if isinstance(listed, list) and all(isinstance(item, str) for item in listed):
            return listed[:-1]
    return words[:-1]


class _Reader:
    def __init__(self, path: str, build_args: dict[str, str]) -> None:
        self.path = path
        self.build_args = build_args
        self.global_args: dict[str, str | None] = {}  # None: a default with quotes or variables, not resolved here
        self.stages: list[str] = []  # stage names (lower case) so far, "" for an unnamed one
        self.images: list[str] = []

    def refuse(self, instruction: Instruction, why: str) -> DockerfileError:
        return DockerfileError(f"{self.path}:{instruction.line}: {instruction.keyword.upper()} {why}")

    def read(self, instructions: list[Instruction]) -> None:
        for instruction in instructions:
            if instruction.keyword == "arg" and not self.stages:
                self._global_arg(instruction)
            elif instruction.keyword == "from":
                self._from(instruction)
            elif instruction.keyword in ("copy", "add"):
                self._copy(instruction)

    def _global_arg(self, instruction: Instruction) -> None:
        for word in _WHITESPACE.split(instruction.arguments.strip()):
            name, _, default = word.partition("=")
            if len(default) >= 2 and default[0] == default[-1] and default[0] in "\"'":
                default = default[1:-1]
            self.global_args[name] = None if any(mark in default for mark in UNREAD_MARKS) else default

    def _expand(self, instruction: Instruction, reference: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name not in self.global_args:
                return ""  # as Docker: a variable no ARG declares is empty in FROM
            if name in self.build_args:
                return self.build_args[name]
            resolved = self.global_args[name]
            if resolved is None:
                raise self.refuse(instruction, f"uses ARG {name}, whose default is not a plain value")
            return resolved

        expanded = _VARIABLE.sub(value, reference)
        if any(mark in _VARIABLE.sub("", reference) for mark in UNREAD_MARKS):
            raise self.refuse(instruction, f"{reference}: only plain $NAME or ${{NAME}} variables are read")
        return expanded

    def _from(self, instruction: Instruction) -> None:
        _, words = _flags(instruction.arguments)
        if not words:
            raise self.refuse(instruction, "names no image")
        image = self._expand(instruction, words[0])
        if image.lower() != NO_STAGE_IMAGE and image.lower() not in self.stages:
            self.images.append(image)
        self.stages.append(words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else "")

    def _copy(self, instruction: Instruction) -> None:
        flags, words = _flags(instruction.arguments)
        source = flags.get("from")
        if source is not None:
            if any(mark in source for mark in UNREAD_MARKS):
                raise self.refuse(instruction, f"--from={source}: only a stage name or a plain image name is read")
            known = source.lower() in self.stages or (source.isdigit() and int(source) < len(self.stages))
            if not known:
                self.images.append(source)
        if instruction.keyword != "add":
            return
        if _REMOTE_SOURCE.search(instruction.arguments):
            raise self.refuse(
                instruction, "of a URL or a git repository: the Docker daemon would fetch it over the host's network"
            )
        if any("$" in path for path in _sources(words)):
            raise self.refuse(instruction, "with a variable in its source: it could name a URL")


def base_images(text: str, path: str, build_args: dict[str, str]) -> list[str]:
    """The images outside the Dockerfile that a build of it starts from or copies out of, in order; a
    DockerfileError when it is too large, or would fetch anything itself."""
    if len(text) > MAX_DOCKERFILE_BYTES:
        raise DockerfileError(f"{path}: larger than {MAX_DOCKERFILE_BYTES // 1024} KiB, not read")
    escapes = [DEFAULT_ESCAPE, OTHER_ESCAPE] if _ESCAPE_DIRECTIVE.search(text) else [DEFAULT_ESCAPE]
    images: list[str] = []
    for escape in escapes:
        reader = _Reader(path, build_args)
        reader.read(split_instructions(text, escape))
        if not reader.stages:
            raise DockerfileError(f"{path}: no FROM instruction")
        images += [image for image in reader.images if image not in images]
    return images
