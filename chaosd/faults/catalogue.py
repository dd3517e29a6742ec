"""The fault catalogue: twenty-two reversible actions by name, each with its targets, parameters and recovery check
(:mod:`chaosd.faults.action`), in families: agents, the stage DAG, dependencies, the load.
"""

from __future__ import annotations

from collections.abc import Mapping

from chaosd.faults.action import Action, Param
from chaosd.faults.agent_actions import (
    DropMessages,
    KillAgent,
    KillLeader,
    KillOrchestrator,
    NetworkPartition,
    PauseAgent,
    PoolExhaustion,
    ResumeAgent,
    SlowAgent,
)
from chaosd.faults.dependency_actions import (
    DependencyError,
    DependencyLatency,
    DependencyReset,
    DependencySlice,
    DependencyTimeout,
)
from chaosd.faults.load_actions import LoadSpike
from chaosd.faults.stage_actions import (
    LatencyJitter,
    LlmFailure,
    McpDisconnect,
    MemoryCorrupt,
    RemoveEdge,
    RemoveNode,
    StageAction,
    ToolTimeout,
)

__all__ = ["CATALOGUE", "Action", "Param", "is_remedy", "target_problem"]


CATALOGUE: dict[str, Action] = {
    a.name: a
    for a in (
        KillLeader(),
        KillOrchestrator(),
        KillAgent(),
        RemoveNode(),
        RemoveEdge(),
        PauseAgent(),
        ResumeAgent(),
        SlowAgent(),
        NetworkPartition(),
        ToolTimeout(),
        MemoryCorrupt(),
        McpDisconnect(),
        LlmFailure(),
        LoadSpike(),
        LatencyJitter(),
        DropMessages(),
        PoolExhaustion(),
        DependencyLatency(),
        DependencyError(),
        DependencyReset(),
        DependencyTimeout(),
        DependencySlice(),
    )
}


def target_problem(action: str, target: str | None, stages: Mapping[str, str]) -> str | None:
    """Why a stage action's target names no stage of this configuration (``stages``: name → kind), checked
    before a scenario runs; None when it does, or when the action's targets exist only at run time (agents)."""
    spec = CATALOGUE.get(action)
    if not isinstance(spec, StageAction) or target is None:
        return None
    return spec.target_problem(target, stages)


def is_remedy(action: str) -> bool:
    """Whether ``action`` is an instantaneous remedy (see :attr:`Action.remedies`) rather than a blow of its own."""
    spec = CATALOGUE.get(action)
    return spec is not None and spec.remedies is not None
