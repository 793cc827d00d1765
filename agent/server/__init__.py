"""llama-server for the agent: presets, a launcher with a state file, `doctor`, and the embedded fallback.

Exports load on first use (PEP 562): `pack` and `--help` import the CLI, which must not pay for httpx and the
launcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.server.ensure import ensure_server

__all__ = ["ensure_server"]


def __getattr__(name: str) -> Any:
    if name != "ensure_server":
        raise AttributeError(f"module 'agent.server' has no attribute {name!r}")
    from agent.server.ensure import ensure_server

    return ensure_server
