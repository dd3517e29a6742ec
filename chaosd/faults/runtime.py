"""The runtime the faults act through: every operation and observation the catalogue and injector need, nothing more.

The pipeline implements it; tests drive the catalogue and the injector with in-memory fakes. Calls come
only when a fault is resolved, applied, reverted or checked, or once per telemetry tick, never from a
task's hot path.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

from chaosd.views import FailReason

__all__ = [
    "AgentState",
    "Agents",
    "Dependencies",
    "DuplicateCount",
    "EffectAudit",
    "Leadership",
    "Load",
    "MemoryState",
    "Readings",
    "Runtime",
    "StageState",
    "Stages",
    "TaskCounts",
    "TaskLedger",
    "Workflow",
]


class AgentState(Protocol):
    """One agent as a fault sees it: current values, read-only (faults change agents through the runtime)."""

    @property
    def id(self) -> str:
        """Unique among the runtime's agents; never changes."""

    @property
    def kind(self) -> str:
        """``worker``, ``producer`` or ``orchestrator``; never changes."""

    @property
    def alive(self) -> bool:
        """Not killed, or resurrected since."""

    @property
    def paused(self) -> bool:
        """Paused by a fault and not resumed yet."""

    @property
    def served(self) -> int:
        """Tasks finished (a worker) or offered (a producer); only ever grows, across restarts too."""


class StageState(Protocol):
    """One stage as a fault sees it: current values, read-only (faults change stages through the runtime)."""

    @property
    def kind(self) -> str:
        """``compute``, ``tool``, ``llm``, ``memory``, ``mcp`` or ``python``; never changes."""

    @property
    def hang_timeout(self) -> float:
        """Seconds a hung call waits before it is cut."""

    @property
    def degraded(self) -> int:
        """Outcomes the stage gave up on or skipped; only ever grows."""

    @property
    def successes(self) -> int:
        """Attempts the stage served; only ever grows."""

    @property
    def fallback_served(self) -> int:
        """Attempts the fallback model served; only ever grows."""

    @property
    def failures(self) -> Mapping[FailReason, int]:
        """Failed attempts by reason (a ``FailReason``); each count only ever grows."""

    @property
    def handler_errors(self) -> Mapping[str, int]:
        """python stages: attempts whose handler raised, by exception type; each count only ever grows."""

    @property
    def dependencies(self) -> Mapping[str, str]:
        """The dependencies its calls go through, by name: their kind, ``http`` or ``tcp``; never changes."""


class TaskCounts(Protocol):
    """Tasks that ended badly so far, by how; each count only ever grows."""

    @property
    def late(self) -> int:
        """Completed after their deadline."""

    @property
    def failed(self) -> int:
        """Ended in failure."""

    @property
    def rejected(self) -> int:
        """Refused at the door (a full queue, admission control)."""

    @property
    def degraded(self) -> int:
        """Completed in time but degraded (a stage gave up on or skipped its part)."""


class TaskLedger(Protocol):
    """The sink's books as the injector reads them: the tally of every task's outcome, nothing else."""

    @property
    def total(self) -> TaskCounts:
        """Every task since the runtime started, warm-up included."""


class DuplicateCount(Protocol):
    """Duplicated effects as the injector reads them."""

    @property
    def count(self) -> int:
        """Effects the sink applied more than once; only ever grows."""


class EffectAudit(Protocol):
    """The audit of the sink's effects as the injector reads it."""

    @property
    def total(self) -> DuplicateCount:
        """Every task since the runtime started, warm-up included."""


class MemoryState(Protocol):
    """One memory stage's store as the injector reads it."""

    @property
    def undetected_reads(self) -> int:
        """Reads that served a corrupt entry unnoticed; only ever grows."""


class Readings(Protocol):
    """What the injector reads to time a fault and weigh what users felt (and a tick's queue slack)."""

    def elapsed(self) -> float:
        """Seconds since the runtime started, on its clock (virtual or real); never goes back."""

    @property
    def ledger(self) -> TaskLedger:
        """The tasks that ended badly, counted (a fault's impact is the difference of two readings)."""

    @property
    def audit(self) -> EffectAudit:
        """The effects applied twice, counted."""

    @property
    def memory(self) -> Mapping[str, MemoryState]:
        """Every memory stage's store by stage name (none without memory stages); the names never change."""

    @property
    def workers(self) -> Collection[object]:
        """Every worker listed, local or remote; only their number is read (a task of queue slack each)."""

    @property
    def stages(self) -> Mapping[str, StageState]:
        """Every stage by name (their failed attempts date an incident nobody injected); the names never change."""


class Agents(Protocol):
    """The workers, producers and orchestrators a fault kills, pauses, cuts off or slows, and their task leases."""

    @property
    def agents(self) -> Mapping[str, AgentState]:
        """Every agent by id, dead ones included; ids are never removed (a backend may list new ones as they appear)."""

    def kill_agent(self, agent_id: str) -> None:
        """Kill the agent now: it stops working (a leader stops leading); the supervisor may resurrect it."""

    def pause(self, ids: Collection[str], on: bool) -> None:
        """Pause the agents (``on``) or resume them; a paused agent takes no work until resumed."""

    def partition(self, ids: Collection[str], on: bool) -> None:
        """Cut the agents off (``on``) or reconnect them: no dispatch to them; their outcomes and offers are lost."""

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        """Hold the agents out of service (``on``), as if something else had taken them, or give them back."""

    def slow(self, ids: Collection[str], factor: float) -> None:
        """Multiply the workers' service times (divide the producers' rates) by ``factor``; 1.0 reverts."""

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        """Lose that share of the dispatches to these workers (their task leases bring them back); 0 reverts."""

    def dropped(self, ids: Collection[str]) -> int:
        """Dispatches to these workers lost so far; only ever grows."""

    def held_tasks(self, ids: Collection[str]) -> int:
        """Tasks these workers hold in service right now."""

    def lease_expired(self) -> int:
        """Task leases that ran out, their tasks taken back; only ever grows."""


class Leadership(Protocol):
    """Who holds the dispatch lease: what a leader's death and its election show in."""

    def leader(self) -> str | None:
        """The id of the orchestrator holding the dispatch lease; None while nobody holds it."""

    def elections(self) -> int:
        """Leader elections won so far; only ever grows."""


class Workflow(Protocol):
    """The workflow DAG a fault takes nodes and edges out of, and the route the leader settles on."""

    def edges(self) -> Sequence[tuple[str, str]]:
        """The configured edges ``(a, b)``, removed ones included; they never change."""

    def remove_node(self, name: str, removed: bool) -> None:
        """Take the stage out of the DAG (``removed``) or put it back; the leader reroutes on its next beat."""

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        """Take the edge a->b out of the DAG (``removed``) or put it back; the leader reroutes on its next beat."""

    def settled_route(self) -> tuple[str, ...] | None:
        """The stages tasks walk now; None while a DAG change awaits its reroute, or when no path is left."""


class Stages(Protocol):
    """The stages a fault hangs, fails, delays, corrupts or disconnects."""

    @property
    def stages(self) -> Mapping[str, StageState]:
        """Every stage by name; the names never change."""

    def hang(self, name: str, on: bool, timeout: float) -> None:
        """Make the stage's calls hang (``on``) or not; a hung call is cut after ``timeout`` seconds."""

    def llm_down(self, name: str, on: bool) -> None:
        """Make the stage's primary model fail (``on``) or work again; retries go to its fallback model."""

    def jitter(self, name: str, seconds: float) -> None:
        """Delay each attempt of the stage by a random extra in [0, ``seconds``]; 0 reverts."""

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        """Silently corrupt up to ``entries`` sound entries of the memory stage; returns their indexes."""

    def corrupted(self, name: str) -> AbstractSet[int]:
        """Indexes of the memory stage's entries corrupt right now (a repair removes them)."""

    def mcp_drop(self, name: str, outage: float) -> None:
        """Drop the MCP stage's connection; its server is unreachable for ``outage`` seconds."""

    def mcp_restore(self, name: str) -> None:
        """Bring the MCP stage's server back now; the client reconnects by itself."""

    def mcp_connected(self, name: str) -> bool:
        """Whether the MCP stage's client holds a connection now."""


class Dependencies(Protocol):
    """A python stage's calls to its dependencies, through their fault proxies (the stages list them)."""

    def dependency_fault(self, stage: str, dependency: str, action: str, fields: Mapping[str, float] | None) -> None:
        """Set what ``action`` does to the stage's calls to the dependency (fields of
        ``chaosd.faults.dependency.DependencyFaults``), or lift it (None); other actions on the pair stay."""


class Load(Protocol):
    """The load the producers offer."""

    def spike_load(self, factor: float, on: bool) -> None:
        """Multiply the offered load by ``factor`` (``on``), or divide it back (spikes stack and unstack exactly)."""


class Runtime(Readings, Agents, Leadership, Workflow, Stages, Dependencies, Load, Protocol):
    """What the fault catalogue breaks and watches, and what the injector reads to time and weigh a fault: each
    part above, by what a fault acts on; an action asks for the part it uses where one is enough.

    A change takes effect at once. Setting a switch (``on``, a factor, a probability) twice is setting it
    once; only :meth:`spike_load` stacks. Targets (ids, names, edges) are ones the runtime listed.
    """
