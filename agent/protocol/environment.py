"""The `[environment]` table's type: how a user describes the environment instead of (or on top of) detection.
Read from a file by agent/environment/spec.py; a RunConfig carries it."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class EnvironmentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_image: str | None = Field(None, description="image to layer on (default: the sandbox image)")
    setup: list[str] = Field([], description="shell commands run at build time, after the packages")
    packages: list[str] = Field([], description="extra Python requirements, as pip takes them")
    index_url: str | None = Field(None, description="replaces the host's index (e.g. an internal mirror)")
    extra_index_urls: list[str] = []
    allowed_hosts: list[str] = Field([], description="hosts the build may reach besides the indexes (apt mirror)")
    wheelhouse: Path | None = Field(None, description="directory of wheels: installs with no index and no network")
    detect: bool = Field(True, description="also install what detection finds in the repository")
