"""Agents: the parts of the pipeline that can die, pause, slow down or be cut off — and be resurrected."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from chaosd.views import AgentKind, AgentState

__all__ = ["Activity", "Agent"]


class Activity(Protocol):
    """What an agent runs as: an asyncio task, or an agent of callbacks; either stops when cancelled."""

    def cancel(self) -> object: ...


@dataclass(eq=False)
class Agent:
    """One agent's health. ``gate`` is set while the agent may work (not paused, exhausted or partitioned)."""

    id: str
    kind: AgentKind
    alive: bool = True
    paused: bool = False
    exhausted: bool = False  # held by a pool-exhaustion fault
    partitioned: bool = False
    stalled: bool = False  # not alive because its process stopped beating while it lives (SIGSTOPped, hung)
    slow: float = 1.0  # service-time multiplier (workers) or rate divisor (producers)
    served: int = 0  # tasks finished (workers) or offered (producers): progress after a restart
    restarts: list[float] = field(default_factory=list)  # restart times within the supervisor's window
    restart_count: int = 0  # restarts in all
    gave_up: bool = False  # the supervisor stopped restarting it
    task: Activity | None = None
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    # Called once the gate opens again (callback agents waiting to work), each once.
    _on_open: list[Callable[[], object]] = field(default_factory=list)
    # Whether the gate is set, as a plain attribute: producers and workers read it once per task, and
    # ``Event.is_set`` is a Python call. Only ``refresh`` changes either.
    gate_open: bool = True

    def __post_init__(self) -> None:
        self.gate.set()

    def refresh(self) -> None:
        """Open or close the gate after a flag changed."""
        self.gate_open = self.alive and not (self.paused or self.exhausted or self.partitioned)
        if self.gate_open:
            self.gate.set()
            waiting, self._on_open = self._on_open, []
            for callback in waiting:
                callback()
        else:
            self.gate.clear()

    def when_open(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once the gate next opens."""
        self._on_open.append(callback)

    def forget(self, callback: Callable[[], object]) -> None:
        if callback in self._on_open:
            self._on_open.remove(callback)

    @property
    def state(self) -> AgentState:
        if not self.alive:
            return "stalled" if self.stalled else "dead"
        if self.partitioned:
            return "partitioned"
        if self.paused or self.exhausted:
            return "paused"
        if self.slow != 1.0:
            return "slow"
        return "running"
