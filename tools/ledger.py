"""The state ledger: a short, machine-kept account of where the refactor stands.

After every tool call that may change files, the registry appends it to that call's result (tools/base.py): the
files changed so far and, for each "old" name (read from the task, or declared by the model's `plan`), how many
code references are left and where the first few are. It is appended to the new tool result and never
re-rendered into earlier messages, so the prompt prefix stays cached. `plan`/`update_plan` keep the model's own
checklist, and `finish` while old references remain gets one reminder first (tools/finish.py).

RefactorBench found explicit state improved language-model agents by 43.9%; `refactor-agent eval --ledger
on|off` measures whether it helps here.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field

from tools.base import ToolContext, ToolError, ToolSpec
from tools.symbols import call_symbols_helper

FILES_SHOWN = 8
# Words between "rename" and the name itself that are not the name: "rename the method X to Y".
NOT_A_NAME = {
    "the",
    "a",
    "an",
    "function",
    "class",
    "method",
    "variable",
    "module",
    "attribute",
    "parameter",
    "argument",
    "constant",
    "field",
    "property",
    "all",
    "every",
    "each",
    "of",
    "instances",
    "occurrences",
}
RENAME_PATTERN = re.compile(r"\brename\b((?:\s+[`'\"]?[\w.]+[`'\"]?){1,6}?)\s+(?:to|into|as)\b", re.IGNORECASE)


def old_names_in(task: str) -> list[str]:
    """The names a task says to rename away ("Rename get_auth to get_authorization ..."), last dotted part."""
    names = []
    for match in RENAME_PATTERN.finditer(task):
        words = [word.strip("`'\"") for word in match.group(1).split()]
        candidates = [word.rsplit(".", 1)[-1] for word in words if word.lower() not in NOT_A_NAME]
        if candidates and candidates[-1].isidentifier() and candidates[-1] not in names:
            names.append(candidates[-1])
    return names


class PlanItem(BaseModel):
    text: str
    done: bool = False


class Ledger:
    def __init__(self, old_names: list[str]) -> None:
        self.old_names = list(old_names)
        self.plan: list[PlanItem] = []
        self.reminded = False

    def _state(self, context: ToolContext) -> dict:
        reply = call_symbols_helper(context, {"op": "ledger", "old_names": self.old_names})
        return json.loads(reply)

    def render(self, context: ToolContext) -> str:
        """The ledger's lines as they are appended to a tool result."""
        try:
            state = self._state(context)
        except ToolError as error:  # the ledger informs; its own failure must not fail the model's edit
            return f"[ledger unavailable: {error}]"
        changed = state["changed"]
        shown = ", ".join(changed[:FILES_SHOWN]) + (", ..." if len(changed) > FILES_SHOWN else "")
        lines = [f"[ledger] files changed so far: {len(changed)}" + (f" ({shown})" if changed else "")]
        if self.old_names:
            left = [
                f"{name}: {entry['count']} left" + (f" ({', '.join(entry['first'])}, ...)" if entry["count"] else "")
                for name, entry in state["left"].items()
            ]
            lines.append("[ledger] old names: " + "; ".join(left))
        if self.plan:
            done = sum(item.done for item in self.plan)
            upcoming = next((f"; next: {item.text}" for item in self.plan if not item.done), "")
            lines.append(f"[ledger] plan: {done}/{len(self.plan)} done{upcoming}")
        return "\n".join(lines)

    def reminder(self, context: ToolContext) -> str | None:
        """Once per task: the reason not to finish yet, while old references are left."""
        if self.reminded or not self.old_names:
            return None
        try:
            left = {name: entry for name, entry in self._state(context)["left"].items() if entry["count"]}
        except ToolError:
            return None
        if not left:
            return None
        self.reminded = True
        where = "; ".join(f"{name}: {entry['count']} ({', '.join(entry['first'])})" for name, entry in left.items())
        return (
            f"Not finished yet: references to old names remain ({where}). Update them (find_symbol lists them), "
            "or call finish again if they are meant to stay."
        )

    def render_plan(self) -> str:
        return (
            "\n".join(
                f"{number}. [{'x' if item.done else ' '}] {item.text}" for number, item in enumerate(self.plan, start=1)
            )
            or "the plan is empty"
        )


class PlanArguments(BaseModel):
    items: list[str] = Field(min_length=1, description="The steps of the refactor, in order (replaces the plan).")
    old_names: list[str] = Field(
        default_factory=list, description="Names being replaced: the ledger counts the references left to each."
    )


class UpdatePlanArguments(BaseModel):
    done: list[int] = Field(min_length=1, description="Numbers (1-based) of the plan items now done.")


def _ledger_of(context: ToolContext) -> Ledger:
    if context.ledger is None:
        raise ToolError("the ledger is off for this run (--ledger off)")
    return context.ledger


def plan(arguments: PlanArguments, context: ToolContext) -> str:
    ledger = _ledger_of(context)
    bad = [name for name in arguments.old_names if not name.isidentifier()]
    if bad:
        raise ToolError(f"old_names must be identifiers (no dots); not: {', '.join(bad)}")
    ledger.plan = [PlanItem(text=text) for text in arguments.items]
    ledger.old_names += [name for name in arguments.old_names if name not in ledger.old_names]
    return (
        f"plan recorded; the ledger tracks old names: {', '.join(ledger.old_names) or 'none'}\n" + ledger.render_plan()
    )


def update_plan(arguments: UpdatePlanArguments, context: ToolContext) -> str:
    ledger = _ledger_of(context)
    unknown = [number for number in arguments.done if not 1 <= number <= len(ledger.plan)]
    if unknown:
        raise ToolError(f"the plan has {len(ledger.plan)} items; no item {unknown[0]} (make one with plan)")
    for number in arguments.done:
        ledger.plan[number - 1].done = True
    return ledger.render_plan()


LEDGER_TOOLS = [
    ToolSpec("plan", "Record your checklist for this task and the old names being replaced.", PlanArguments, plan),
    ToolSpec("update_plan", "Mark plan items done.", UpdatePlanArguments, update_plan),
]
