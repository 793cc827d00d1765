"""Where the environment comes from. What the user says wins over what the repository holds: an explicit image
(`--image`, or `image` in a config or night file), then an [environment] table (`--environment`, the night file),
then the repository's devcontainer.json when its base is allowed and on this machine, then detection, or nothing
(the bare sandbox image). Each source found and not used is named in the plan, with the reason."""

from __future__ import annotations

import shlex

from agent.environment.bases import BaseImages
from agent.environment.committed import CommittedTree
from agent.environment.detect import UV, VENV, Detected, detect, python_path, venv_step
from agent.environment.devcontainer import DevcontainerError, devcontainer_parts, find_devcontainer
from agent.environment.indexes import IndexConfig, host_index_config, with_table
from agent.environment.plan import WHEELHOUSE_DIR, EnvironmentPlan, SetupStep
from agent.protocol.environment import EnvironmentSpec
from agent.safety.printable import counted
from sandbox.models import DEFAULT_IMAGE
from sandbox.suites import DEFAULT_SUITE, PYTHON_OF_SUITE, image_for_suite, suite_for


def resolve_plan(
    tree: CommittedTree,
    *,
    sandbox_image: str,
    image_explicit: bool,
    spec: EnvironmentSpec | None,
    bases: BaseImages,
    host_index: IndexConfig | None = None,
) -> EnvironmentPlan:
    devcontainer = find_devcontainer(tree)
    if image_explicit:
        plan = EnvironmentPlan(
            source="image",
            description=f"--image {sandbox_image}, used as is",
            base_image=sandbox_image,
            used=[f"image {sandbox_image}, used as is"],
        )
        return _skipping(plan, devcontainer, "an explicit image wins over the repository's")
    host_index = host_index if host_index is not None else host_index_config()
    if spec is not None:
        plan = _from_table(tree, spec, sandbox_image, host_index)
        return _skipping(plan, devcontainer, "the [environment] table given wins over the repository's")
    skipped = []
    if devcontainer is not None:
        try:
            return _from_devcontainer(tree, devcontainer, bases, host_index)
        except DevcontainerError as error:
            skipped.append(f"devcontainer: {error}")
    return _detected(tree, sandbox_image, host_index).model_copy(update={"skipped": skipped})


def _skipping(plan: EnvironmentPlan, devcontainer: str | None, reason: str) -> EnvironmentPlan:
    if devcontainer is None:
        return plan
    return plan.model_copy(update={"skipped": [*plan.skipped, f"devcontainer: {devcontainer}: not used, {reason}"]})


def _from_devcontainer(tree: CommittedTree, path: str, bases: BaseImages, host_index: IndexConfig) -> EnvironmentPlan:
    image, dockerfile, steps, env = devcontainer_parts(tree, path, bases)
    base = f"image {image}" if image else f"Dockerfile {dockerfile.dockerfile} in {dockerfile.context or '.'}"
    used = [f"devcontainer: {path}"]
    detected = detect(tree)
    if any(name.startswith("python") for name in detected.ecosystems):
        env = {"PYTHONPATH": python_path(tree), **env}
        used.append("detection: PYTHONPATH only")
    return EnvironmentPlan(
        source="devcontainer",
        description=f"{path}: {base}, {counted(len(steps), 'lifecycle command')}",
        base_image=image,
        dockerfile=dockerfile,
        files={path: tree.read(path)},
        steps=steps,
        env=env,
        index=host_index,
        needs_snapshot=bool(steps),
        used=used,
    )


def _detected(tree: CommittedTree, sandbox_image: str, host_index: IndexConfig) -> EnvironmentPlan:
    detected = detect(tree)
    if not detected.steps:
        what = f" ({', '.join(detected.ecosystems)})" if detected.ecosystems else ""
        return EnvironmentPlan(
            source="none",
            description=f"no dependencies detected{what}: the sandbox image as is",
            base_image=sandbox_image,
            used=[f"sandbox image {sandbox_image} as is: no dependencies detected{what}"],
        )
    base, why = python_base(sandbox_image, detected.requires_python)
    return EnvironmentPlan(
        source="detected",
        description="detected " + ", ".join(detected.ecosystems) + why,
        base_image=base,
        files=detected.files,
        tree_files=detected.tree_files,
        needs_snapshot=bool(detected.tree_files),
        steps=detected.steps,
        env=detected.env,
        path_prepend=detected.path_prepend,
        index=host_index,
        hosts=[*detected.hosts, *([] if host_index.offline else detected.online_hosts)],
        used=[f"detection: {', '.join(detected.ecosystems)}"],
    )


def python_base(sandbox_image: str, requires_python: str | None) -> tuple[str, str]:
    """The base image whose Python meets the project's requires-python, and the words that say why: the default
    sandbox image when it does (or when the user chose another image), a newer Debian release's otherwise."""
    if requires_python is None or sandbox_image != DEFAULT_IMAGE:
        return sandbox_image, ""
    suite = suite_for(requires_python)
    if suite is None:
        default = PYTHON_OF_SUITE[DEFAULT_SUITE]
        return sandbox_image, f"; no Python of ours meets requires-python {requires_python}: {default} it is"
    if suite == DEFAULT_SUITE:
        return sandbox_image, ""
    return image_for_suite(suite), f"; Python {PYTHON_OF_SUITE[suite]} for requires-python {requires_python}"


def _from_table(
    tree: CommittedTree, spec: EnvironmentSpec, sandbox_image: str, host_index: IndexConfig
) -> EnvironmentPlan:
    """The table's base, indexes, packages and setup commands, on top of detection unless `detect = false`."""
    detected = detect(tree) if spec.detect else Detected()
    index = with_table(
        host_index,
        index_url=spec.index_url,
        extra=spec.extra_index_urls,
        wheelhouse=spec.wheelhouse,
        mount=WHEELHOUSE_DIR,
    )
    if spec.packages:
        if "VIRTUAL_ENV" not in detected.env:
            detected.steps.append(venv_step())
            detected.env.update({"VIRTUAL_ENV": VENV, "PYTHONPATH": python_path(tree)})
            detected.path_prepend.append(f"{VENV}/bin")
        packages = " ".join(shlex.quote(package) for package in spec.packages)
        detected.steps.append(
            SetupStep(name="python: packages from [environment]", command=f"{UV} pip install {packages}")
        )
    detected.steps += [
        SetupStep(name=f"setup command {number}", command=command) for number, command in enumerate(spec.setup, 1)
    ]
    base, why = (spec.base_image, "") if spec.base_image else python_base(sandbox_image, detected.requires_python)
    found = ", ".join(detected.ecosystems) or "nothing detected"
    return EnvironmentPlan(
        source="environment-file",
        description=f"[environment] table: base {base}, {found}, {counted(len(spec.packages), 'package')}, "
        f"{counted(len(spec.setup), 'setup command')}, packages from {index.describe()}{why}",
        base_image=base,
        files=detected.files,
        tree_files=detected.tree_files,
        needs_snapshot=bool(detected.tree_files),
        steps=detected.steps,
        env=detected.env,
        path_prepend=detected.path_prepend,
        index=index,
        hosts=[*detected.hosts, *([] if index.offline else detected.online_hosts), *spec.allowed_hosts],
        used=["[environment] table", *([f"detection: {found}"] if detected.ecosystems else [])],
    )
