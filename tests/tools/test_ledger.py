"""The state ledger: old names read from the task, the account appended after edits (never re-rendered), the
plan tools, and the one reminder at finish, with the scripted model in the loop over the real sandbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.loop import AgentLoop
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client
from tools.base import ToolContext
from tools.ledger import Ledger, old_names_in
from tools.registry import default_registry
from tools.symbols import sandbox_mounts

from support.repos import SAMPLE_FILES, make_repo, restore_checkout
from support.scripted_model import ScriptedModel
from support.scripted_server import Reply


@pytest.mark.parametrize(
    ("task", "names"),
    [
        (
            "Rename get_authorization_scheme_param to get_auth_scheme_param and update the usages.",
            ["get_authorization_scheme_param"],
        ),
        ("Rename the method `Request.get_json` to `parse_json` throughout.", ["get_json"]),
        ("rename compute_area into area, then rename the class Shape as Figure", ["compute_area", "Shape"]),
        ("Move restock into its own module.", []),
    ],
)
def test_old_names_come_from_the_task(task: str, names: list[str]) -> None:
    assert old_names_in(task) == names


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerSandbox]:
    repo = make_repo(tmp_path_factory.mktemp("ledger") / "repo", SAMPLE_FILES)
    mounts = [repo / ".git", *sandbox_mounts()]
    with DockerSandbox(
        DEFAULT_IMAGE, repo, run_id="test-ledger", client=docker_client(), read_only_paths=mounts
    ) as box:
        yield box


def call(name: str, **arguments: object) -> Reply:
    return Reply(tool_calls=[(name, arguments)])


def run_loop(sandbox: DockerSandbox, script: list[Reply], old_names: list[str]) -> tuple[list[dict], ScriptedModel]:
    restore_checkout(sandbox.workspace)
    context = ToolContext(sandbox, None, 60, 20_000, ledger=Ledger(old_names))
    model = ScriptedModel(script)
    loop = AgentLoop(model, default_registry(), context, max_turns=10, emit=lambda event: None)
    loop.run("SYSTEM", "Rename compute_area to area")
    return loop.messages, model


@pytest.mark.docker
def test_the_ledger_follows_edits_and_finish_is_reminded_once(sandbox: DockerSandbox) -> None:
    rename = call("str_replace", path="pkg/geometry.py", old="def compute_area", new="def area")
    script = [
        rename,
        call("view_file", path="pkg/report.py"),
        call("finish", summary="Rename"),
        call("finish", summary="Rename"),
    ]
    messages, model = run_loop(sandbox, script, ["compute_area"])
    results = [message["content"] for message in messages if message["role"] == "tool"]
    assert results[0].endswith(
        "\n\n[ledger] files changed so far: 1 (pkg/geometry.py)\n"
        "[ledger] old names: compute_area: 4 left (pkg/report.py:1, pkg/report.py:5, tests/test_geometry.py:1, ...)"
    )
    assert "[ledger]" not in results[1], "reading changes nothing: no ledger"
    assert results[2].startswith("Not finished yet: references to old names remain (compute_area: 4 (pkg/report.py:1")
    assert results[3] == "finished", "one reminder, then finish is accepted"
    for earlier, later in zip(model.requests, model.requests[1:], strict=False):
        assert later[: len(earlier)] == earlier, "earlier messages are never re-rendered: the prefix stays cached"


@pytest.mark.docker
def test_finish_is_not_held_up_when_no_old_reference_is_left(sandbox: DockerSandbox) -> None:
    renamed = call("rename_symbol", path="pkg/geometry.py", line=1, column=5, new_name="area")
    messages, _ = run_loop(sandbox, [renamed, call("finish", summary="Rename")], ["compute_area"])
    results = [message["content"] for message in messages if message["role"] == "tool"]
    assert "[ledger] old names: compute_area: 0 left" in results[0]
    assert results[1] == "finished"


@pytest.mark.docker
def test_the_plan_is_kept_and_its_old_names_are_counted(sandbox: DockerSandbox) -> None:
    script = [
        call("plan", items=["rename describe", "update callers"], old_names=["describe"]),
        call("update_plan", done=[3]),
        call("update_plan", done=[1]),
        call("create_file", path="notes.txt", content="x\n"),
        call("finish", summary="Done"),
        call("finish", summary="Done"),
    ]
    messages, _ = run_loop(sandbox, script, [])
    results = [message["content"] for message in messages if message["role"] == "tool"]
    assert results[0] == (
        "plan recorded; the ledger tracks old names: describe\n1. [ ] rename describe\n2. [ ] update callers"
    )
    assert results[1] == "error: the plan has 2 items; no item 3 (make one with plan)"
    assert results[2] == "1. [x] rename describe\n2. [ ] update callers"
    assert results[3].endswith(
        "[ledger] files changed so far: 1 (notes.txt)\n"
        "[ledger] old names: describe: 3 left (pkg/report.py:4, tests/test_geometry.py:2, tests/test_geometry.py:10, "
        "...)\n"
        "[ledger] plan: 1/2 done; next: update callers"
    )
    assert results[4].startswith("Not finished yet") and results[5] == "finished"


@pytest.mark.docker
def test_a_ledger_of_hundreds_of_long_names_stays_inside_the_result_cap(sandbox: DockerSandbox) -> None:
    # The model names them, as long as it likes: the account alone runs past 100 KB.
    names = [f"name_{number}_{'x' * 400}" for number in range(300)]
    content = "\n".join(f"{name} = {name}" for name in names) + "\n"
    script = [
        call("plan", items=["rename them"], old_names=names),
        call("create_file", path="many.py", content=content),
        call("finish", summary="Done"),
        call("finish", summary="Done"),
    ]
    messages, _ = run_loop(sandbox, script, [])
    edit = [message["content"] for message in messages if message["role"] == "tool"][1]
    assert len(edit) <= 20_000
    assert "[ledger] files changed so far: 1 (many.py)" in edit and "characters cut" in edit


def test_switched_off_the_tools_are_not_offered() -> None:
    names = default_registry(symbol_tools=False, ledger=False).names
    assert not {"plan", "update_plan", "find_symbol", "rename_symbol", "move_symbol"} & set(names)
    assert {"plan", "update_plan", "find_symbol", "rename_symbol", "move_symbol"} <= set(default_registry().names)
