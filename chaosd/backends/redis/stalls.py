"""Local worker processes judged by their heartbeats: one that stops beating while its process lives (SIGSTOPped
from outside, or hung) is shown ``stalled``, not running.

Each heartbeat carries a new number. A beat that has not changed for two heartbeat periods, from a process the OS
reports stopped (``T`` in ``/proc/PID/stat``), is a stall at once: about two to three periods after the stop. A
process that is not stopped but does not beat (hung, or a host so loaded it misses beats) is judged only once its
heartbeat key has expired (five periods) and a further half second has passed without a beat: about a second in
all, so a busy host's late beats are not called stalls."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from chaosd.backends.redis.replies import HEARTBEAT_S, Heartbeat
from chaosd.pipeline import Pipeline
from chaosd.pipeline.agents import Agent

__all__ = ["LocalPids", "Stalls", "stopped"]

# Seconds a heartbeat stays missing before the worker is judged: a Redis that came back empty, or a worker just
# resumed after pause_agent, beats again within a tenth of a second and is not shown dead meanwhile.
GRACE_S = 0.5
SILENT_S = 2 * HEARTBEAT_S  # an unchanged beat this old, from a stopped process, is a stall


class LocalPids(Protocol):
    def is_local(self, agent_id: str) -> bool:
        """A process this daemon started and supervises."""

    def pid(self, agent_id: str) -> int | None:
        """The OS process behind a local agent (None once it has exited)."""


def _pid_of(instance: str | None) -> int | None:
    """The pid a heartbeat's ``instance`` names (``<pid>-<random>``, see RedisWorker.instance)."""
    head = (instance or "").split("-", 1)[0]
    return int(head) if head.isdigit() else None


def stopped(pid: int) -> bool:
    """Whether the OS has ``pid`` stopped (SIGSTOP, or a tracer's stop); False where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split(b" ", 1)  # after "pid (comm) ": the state letter
    return fields[0] in (b"T", b"t")


class Stalls:
    """Local workers whose process lives but does not beat: shown ``stalled`` (not alive, as a dead one) with an
    ``agent`` event ``state: "stalled", heartbeat: "lost"``, and ``alive`` again at their next beat. Not
    restarted: the process is still there, and a SIGCONT brings it back with what it held. One the daemon paused
    itself (pause_agent SIGSTOPs it) is ``paused``, and not judged here."""

    def __init__(self, pipeline: Pipeline, procs: LocalPids) -> None:
        self._p = pipeline
        self._procs = procs
        self._beat: dict[str, int] = {}  # agent id -> the pid whose heartbeat was last seen
        self._fresh: dict[str, tuple[str, float]] = {}  # agent id -> its last beat's number, and when it was new
        self._missing: dict[str, float] = {}  # agent id -> when (daemon clock) its heartbeat was first missed
        self.stalled: dict[str, int] = {}  # agent id -> the pid that stopped beating

    def observe(self, agent: Agent, beat: Heartbeat) -> None:
        """One monitor pass's heartbeat of a local worker."""
        pid = self._procs.pid(agent.id)
        if pid is None:
            return  # exited: check_processes reports it (see :meth:`exited`)
        if agent.paused:  # SIGSTOPped by the daemon: judged again once it has beaten after its resumption
            self._beat.pop(agent.id, None)
            self._fresh.pop(agent.id, None)
            return
        if self.stalled.get(agent.id, pid) != pid:
            del self.stalled[agent.id]  # another process now (restarted): it has not stalled
        now = self._p.clock.now()
        if beat.beating and _pid_of(beat.instance) == pid:
            number, since = self._fresh.get(agent.id, ("", now))
            if beat.beat != number or not beat.beat:
                self._fresh[agent.id] = (beat.beat, now)
                self._beats_again(agent, pid, beat)
            elif agent.alive and now - since >= SILENT_S and self._beat.get(agent.id) == pid and stopped(pid):
                self._stall(agent, pid, stopped=True)
        elif (
            not beat.beating  # its key expired: no beat for 0.5 s
            and self._beat.get(agent.id) == pid  # it beat before, so it is not still starting
            and agent.alive
            and now - self._missing.setdefault(agent.id, now) >= GRACE_S
        ):
            self._stall(agent, pid, stopped=stopped(pid))

    def _beats_again(self, agent: Agent, pid: int, beat: Heartbeat) -> None:
        self._beat[agent.id] = pid
        self._missing.pop(agent.id, None)
        if self.stalled.pop(agent.id, None) is not None and not agent.alive:
            agent.alive = True
            agent.stalled = False
            agent.refresh()
            p = self._p
            p.events.record(p.elapsed(), "agent", agent=agent.id, state="alive", instance=beat.instance or "")

    def _stall(self, agent: Agent, pid: int, *, stopped: bool) -> None:
        self.stalled[agent.id] = pid
        agent.alive = False
        agent.stalled = True
        agent.refresh()
        p = self._p
        p.events.record(
            p.elapsed(), "agent", agent=agent.id, state="stalled", heartbeat="lost", pid=pid, stopped=stopped
        )

    def exited(self) -> None:
        """A stalled process that has exited meanwhile is handed back alive, so that the check of the processes
        reports its exit and the supervisor restarts it, as for any worker that dies."""
        for agent_id in [a for a in self.stalled if self._procs.pid(a) is None]:
            del self.stalled[agent_id]
            agent = self._p.agents[agent_id]
            agent.alive = True
            agent.stalled = False
            agent.refresh()
