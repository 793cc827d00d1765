"""Where tasks run on this machine: over a fleet of servers and their slots when there are several servers or
--parallel, else one after the other."""

from __future__ import annotations

from agent.dispatch.fleet import FleetDispatch
from agent.dispatch.in_order import InOrder
from agent.dispatch.seats import ServerPool
from agent.protocol.config import NightConfig
from agent.run.run import TaskDispatch


def local_dispatch(night: NightConfig) -> TaskDispatch:
    llm = night.repos[0].llm  # the night's servers are night-wide settings
    if len(llm.fleet) > 1 or night.parallel > 1:
        return FleetDispatch(llm, ServerPool(llm.fleet, slots_per_server=night.parallel))
    return InOrder()
