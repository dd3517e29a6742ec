"""The supervisor: resurrects dead agents after a backoff, and gives up past a restart intensity (OTP-style)."""

from __future__ import annotations

import random
from collections.abc import Callable

from chaosd.config.settings import SupervisorConfig
from chaosd.core.clock import Clock
from chaosd.events.log import EventLog
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.backoff import backoff_delay

__all__ = ["Supervisor"]


class Supervisor:
    """Schedules a restart for each death; an agent restarted ``max_restarts`` times within ``window`` stays dead."""

    def __init__(
        self,
        cfg: SupervisorConfig,
        clock: Clock,
        events: EventLog,
        rng: random.Random,
        t0: float,
        restart: Callable[[Agent], None],
    ) -> None:
        self.cfg = cfg
        self._clock = clock
        self._events = events
        self._rng = rng
        self._t0 = t0
        self._restart = restart
        self._pending: dict[str, object] = {}  # agent id -> its restart's timer on the clock
        self.restarts = 0
        self.gave_up: list[str] = []

    def died(self, agent: Agent) -> None:
        if not self.cfg.enabled or agent.id in self._pending:
            return
        now = self._clock.now()
        recent = [t for t in agent.restarts if now - t <= self.cfg.window]
        if len(recent) >= self.cfg.max_restarts:
            agent.gave_up = True
            self.gave_up.append(agent.id)
            self._events.record(now - self._t0, "supervisor", agent=agent.id, state="gave_up", restarts=len(recent))
            return
        delay = backoff_delay(self.cfg.backoff, len(recent) + 1, self._rng)
        self._pending[agent.id] = self._clock.call_at(now + delay, self._resurrect, agent)

    def _resurrect(self, agent: Agent) -> None:
        del self._pending[agent.id]
        if agent.alive:
            return
        now = self._clock.now()
        # Only the restarts within the window decide anything: older ones are counted, not kept.
        agent.restarts = [t for t in agent.restarts if now - t <= self.cfg.window]
        agent.restarts.append(now)
        agent.restart_count += 1
        self.restarts += 1
        self._restart(agent)
        self._events.record(now - self._t0, "supervisor", agent=agent.id, state="restarted")

    def close(self) -> None:
        for timer in self._pending.values():
            self._clock.cancel(timer)
        self._pending.clear()
