"""Local worker processes judged by their heartbeats: one that stops beating while its process lives (SIGSTOPped
from outside, or hung) is not shown running. A stopped process cannot beat: its heartbeat key expires five
heartbeat periods (half a second) after its last beat, and once a further half second has passed without one it
is shown stalled: about a second in all."""

from __future__ import annotations

from typing import Protocol

from chaosd.backends.redis.replies import Heartbeat
from chaosd.pipeline import Pipeline
from chaosd.pipeline.agents import Agent

__all__ = ["LocalPids", "Stalls"]

# Seconds a heartbeat stays missing before the worker is judged: a Redis that came back empty, or a worker just
# resumed after pause_agent, beats again within a tenth of a second and is not shown dead meanwhile.
GRACE_S = 0.5


class LocalPids(Protocol):
    def is_local(self, agent_id: str) -> bool:
        """A process this daemon started and supervises."""

    def pid(self, agent_id: str) -> int | None:
        """The OS process behind a local agent (None once it has exited)."""


def _pid_of(instance: str | None) -> int | None:
    """The pid a heartbeat's ``instance`` names (``<pid>-<random>``, see RedisWorker.instance)."""
    head = (instance or "").split("-", 1)[0]
    return int(head) if head.isdigit() else None


class Stalls:
    """Local workers whose process lives but does not beat: shown ``dead`` (as a remote worker that stops beating
    is) with an ``agent`` event ``heartbeat: "lost"``, and ``alive`` again once it beats. Not restarted: the
    process is still there, and a SIGCONT brings it back with what it held. One the daemon paused itself
    (pause_agent SIGSTOPs it) is ``paused``, and not judged here."""

    def __init__(self, pipeline: Pipeline, procs: LocalPids) -> None:
        self._p = pipeline
        self._procs = procs
        self._beat: dict[str, int] = {}  # agent id -> the pid whose heartbeat was last seen
        self._missing: dict[str, float] = {}  # agent id -> when (daemon clock) its heartbeat was first missed
        self.stalled: dict[str, int] = {}  # agent id -> the pid that stopped beating

    def observe(self, agent: Agent, beat: Heartbeat) -> None:
        """One monitor pass's heartbeat of a local worker."""
        pid = self._procs.pid(agent.id)
        if pid is None:
            return  # exited: check_processes reports it (see :meth:`exited`)
        if agent.paused:  # SIGSTOPped by the daemon: judged again once it has beaten after its resumption
            self._beat.pop(agent.id, None)
            return
        if self.stalled.get(agent.id, pid) != pid:
            del self.stalled[agent.id]  # another process now (restarted): it has not stalled
        p = self._p
        now = p.clock.now()
        if beat.beating and _pid_of(beat.instance) == pid:
            self._beat[agent.id] = pid
            self._missing.pop(agent.id, None)
            if self.stalled.pop(agent.id, None) is not None and not agent.alive:
                agent.alive = True
                agent.refresh()
                p.events.record(p.elapsed(), "agent", agent=agent.id, state="alive", instance=beat.instance or "")
        elif not beat.beating and self._beat.get(agent.id) == pid and agent.alive:
            # It beat before, so it is not still starting; its key expired, so it has not beaten for 0.5 s.
            if now - self._missing.setdefault(agent.id, now) < GRACE_S:
                return
            self.stalled[agent.id] = pid
            agent.alive = False
            agent.refresh()
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="dead", heartbeat="lost")

    def exited(self) -> None:
        """A stalled process that has exited meanwhile is handed back alive, so that the check of the processes
        reports its exit and the supervisor restarts it, as for any worker that dies."""
        for agent_id in [a for a in self.stalled if self._procs.pid(a) is None]:
            del self.stalled[agent_id]
            agent = self._p.agents[agent_id]
            agent.alive = True
            agent.refresh()
