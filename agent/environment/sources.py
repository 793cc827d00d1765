"""Where the environment comes from, first match wins: an explicit --image, the repository's devcontainer.json,
an [environment] table, detection, or nothing (the bare sandbox image, as before environments existed)."""

from __future__ import annotations

import shlex

from agent.environment.committed import CommittedTree
from agent.environment.detect import UV, VENV, Detected, detect, python_path, venv_step
from agent.environment.devcontainer import devcontainer_parts, find_devcontainer
from agent.environment.indexes import IndexConfig, host_index_config, with_table
from agent.environment.plan import WHEELHOUSE_DIR, EnvironmentPlan, SetupStep
from agent.environment.spec import EnvironmentSpec


def resolve_plan(
    tree: CommittedTree,
    *,
    sandbox_image: str,
    image_explicit: bool,
    spec: EnvironmentSpec | None,
    host_index: IndexConfig | None = None,
) -> EnvironmentPlan:
    if image_explicit:
        return EnvironmentPlan(
            source="image", description=f"--image {sandbox_image}, used as is", base_image=sandbox_image
        )
    host_index = host_index if host_index is not None else host_index_config()
    devcontainer = find_devcontainer(tree)
    if devcontainer is not None:
        image, dockerfile, steps, env = devcontainer_parts(tree, devcontainer)
        base = f"image {image}" if image else f"Dockerfile {dockerfile.dockerfile} in {dockerfile.context or '.'}"
        detected = detect(tree)
        if any(name.startswith("python") for name in detected.ecosystems):
            env = {"PYTHONPATH": python_path(tree), **env}
        return EnvironmentPlan(
            source="devcontainer",
            description=f"{devcontainer}: {base}, {len(steps)} lifecycle command(s)",
            base_image=image,
            dockerfile=dockerfile,
            files={devcontainer: tree.read(devcontainer)},
            steps=steps,
            env=env,
            index=host_index,
            needs_snapshot=bool(steps),
            hosts=spec.allowed_hosts if spec is not None else [],
        )
    if spec is not None:
        return _from_table(tree, spec, sandbox_image, host_index)
    detected = detect(tree)
    if not detected.steps:
        what = f" ({', '.join(detected.ecosystems)})" if detected.ecosystems else ""
        return EnvironmentPlan(
            source="none",
            description=f"no dependencies detected{what}: the sandbox image as is",
            base_image=sandbox_image,
        )
    return EnvironmentPlan(
        source="detected",
        description="detected " + ", ".join(detected.ecosystems),
        base_image=sandbox_image,
        files=detected.files,
        steps=detected.steps,
        env=detected.env,
        path_prepend=detected.path_prepend,
        index=host_index,
        hosts=detected.hosts,
    )


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
    base = spec.base_image or sandbox_image
    found = ", ".join(detected.ecosystems) or "nothing detected"
    return EnvironmentPlan(
        source="environment-file",
        description=f"[environment] table: base {base}, {found}, {len(spec.packages)} package(s), "
        f"{len(spec.setup)} setup command(s), packages from {index.describe()}",
        base_image=base,
        files=detected.files,
        steps=detected.steps,
        env=detected.env,
        path_prepend=detected.path_prepend,
        index=index,
        hosts=[*detected.hosts, *spec.allowed_hosts],
    )
