"""Poetry's and Pipenv's dependency tables as PEP 508 requirements, for the tables uv does not read itself (Poetry's
groups and `[tool.poetry.dependencies]` without a `[project]` table, a Pipfile without its lock)."""

from __future__ import annotations

import re
from typing import Any

_VERSION = re.compile(r"^\d+(\.\d+)*$")


def _upper(version: str, caret: bool) -> str:
    """The exclusive upper bound of `^version` (the leftmost non-zero part bumped) or `~version`."""
    parts = [int(part) for part in version.split(".")]
    if caret:
        position = next((index for index, part in enumerate(parts) if part != 0), len(parts) - 1)
    else:
        position = 0 if len(parts) == 1 else 1
    bumped = [*parts[:position], parts[position] + 1]
    return ".".join(map(str, bumped))


def constraint(text: str) -> str | None:
    """A Poetry constraint as a PEP 440 specifier ("" for any version); None for a form not understood."""
    text = text.strip()
    if text in ("", "*"):
        return ""
    if "||" in text:
        return None
    specifiers = []
    for part in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", text):
        if part.startswith(("^", "~")) and not part.startswith("~=") and _VERSION.match(part[1:].strip()):
            version = part[1:].strip()
            specifiers.append(f">={version},<{_upper(version, part.startswith('^'))}")
        elif _VERSION.match(part) or re.match(r"^\d+(\.\d+)*\.\*$", part):
            specifiers.append(f"=={part}")
        elif re.match(r"^(==|!=|<=|>=|<|>|~=)\s*[\w.*+!-]+$", part):
            specifiers.append(part.replace(" ", ""))
        else:
            return None
    return ",".join(specifiers)


def requirement(name: str, value: Any) -> str | None:
    """One entry of a Poetry (or Pipfile) table as a requirement; None for what is not on an index (paths, git)
    or is only installed with an extra (`optional = true`)."""
    if name.lower() == "python":
        return None
    if isinstance(value, list):  # several constraints by marker: any version will do here
        return name
    if isinstance(value, dict):
        if value.get("optional") or any(key in value for key in ("path", "git", "url", "file", "editable")):
            return None
        extras = value.get("extras") or []
        version = value.get("version", "*")
    else:
        extras, version = [], value
    if not isinstance(version, str):
        return name
    specifier = constraint(version)
    extra = f"[{','.join(str(item) for item in extras)}]" if isinstance(extras, list) and extras else ""
    return f"{name}{extra}{specifier or ''}"


def requirements(table: Any) -> list[str]:
    if not isinstance(table, dict):
        return []
    return [line for name, value in table.items() if (line := requirement(str(name), value)) is not None]
