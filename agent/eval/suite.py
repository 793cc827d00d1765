"""A suite in RefactorBench's layout (microsoft/RefactorBench), read as data.

- repositories/<repository>/: the projects, plain folders;
- problems/<variant>_problems/<repository>/<task>.txt: one task each;
- tests/<repository>/<test>.py: one static (ast) unittest file per task, run from a folder one level below the
  repository's root;
- scripts/<variant>_mapping.py: `file_mapping = {'../tests/...py': '../problems/...txt', ...}`, the only reliable
  task-to-test map (test names do not always follow task names). It is read with ast.literal_eval, never run.
- reference/<repository>/<task>.patch: this project's addition, a reference solution per task (`eval --oracle`).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

Variant = Literal["base", "descriptive", "lazy"]


class SuiteError(Exception):
    """str() is the one line the user sees."""


class SuiteTask(BaseModel):
    repository: str
    name: str  # the problem file's name without .txt
    prompt: str
    test: Path
    repository_path: Path
    reference: Path | None = None

    @property
    def id(self) -> str:
        return f"{self.repository}/{self.name}"


def _file_mapping(path: Path) -> dict[str, str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError) as error:
        raise SuiteError(f"{path}: cannot read it as Python source ({error})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "file_mapping" for target in node.targets
        ):
            try:
                mapping = ast.literal_eval(node.value)
            except ValueError:
                break
            if isinstance(mapping, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
                return mapping
            break
    raise SuiteError(f"{path}: no `file_mapping = {{'../tests/...py': '../problems/...txt'}}` literal in it")


def _inside(root: Path, relative: str, what: str) -> Path:
    """A mapping's path (relative to scripts/) resolved, refused when it leaves the suite."""
    path = (root / "scripts" / relative).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise SuiteError(f"{what} '{relative}' in the {root.name} mapping is not a file inside the suite")
    return path


def load_suite(root: Path, variant: Variant, only: list[str]) -> list[SuiteTask]:
    """The suite's tasks of `variant` in mapping order, or those named by `only` (REPOSITORY/TASK)."""
    root = root.resolve()
    if not (root / "repositories").is_dir():
        raise SuiteError(f"{root} is not a suite in RefactorBench's layout: it has no repositories/ folder")
    mapping_file = root / "scripts" / f"{variant}_mapping.py"
    if not mapping_file.is_file():
        raise SuiteError(f"{root} has no scripts/{variant}_mapping.py (the task-to-test map of --variant {variant})")
    tasks = []
    for test_relative, problem_relative in _file_mapping(mapping_file).items():
        test = _inside(root, test_relative, "test")
        problem = _inside(root, problem_relative, "problem")
        repository = problem.parent.name
        repository_path = root / "repositories" / repository
        if not repository_path.is_dir():
            raise SuiteError(f"{problem_relative}: no repositories/{repository} folder for it")
        reference = root / "reference" / repository / f"{problem.stem}.patch"
        tasks.append(
            SuiteTask(
                repository=repository,
                name=problem.stem,
                prompt=problem.read_text(encoding="utf-8").strip(),
                test=test,
                repository_path=repository_path,
                reference=reference if reference.is_file() else None,
            )
        )
    if not only:
        return tasks
    known = {task.id: task for task in tasks}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise SuiteError(
            f"--only {unknown[0]}: no such task in --variant {variant} (REPOSITORY/TASK, e.g. {tasks[0].id})"
        )
    return [known[name] for name in dict.fromkeys(only)]
