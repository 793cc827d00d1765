"""How hard the model reasons before answering: its own module, so `pack` (which sizes its budget by it) does not
build every configuration model of agent.protocol.config to know three words."""

from typing import Literal

Effort = Literal["low", "high", "max"]
