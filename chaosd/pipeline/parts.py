"""The parts a backend supplies to the pipeline: its queue, dispatch, busy meter, producers, workers and host.

The pipeline builds what every backend shares (the books, the stages, the DAG, the supervisor) and asks a
``Backend`` for the rest; the in-memory runtime and the Redis one differ only in the parts they hand back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from chaosd.config.settings import Settings
from chaosd.core.clock import Clock
from chaosd.core.histogram import LogHistogram
from chaosd.core.rng import Streams
from chaosd.events.log import EventLog
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.callers import Callers
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.producer import Admission, Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.resources import McpConnection
from chaosd.pipeline.supervisor import Supervisor
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter, Routing, Worker

__all__ = ["Assembly", "Core", "Host", "Leadership", "Parts", "orchestrators", "producers"]

P = TypeVar("P", bound=Producer)
# What a backend's host is built on: the ``Assembly`` in memory; Redis's runtime takes the whole pipeline.
A_contra = TypeVar("A_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class Core:
    """What the pipeline builds before any part: every backend makes its parts from these."""

    settings: Settings
    clock: Clock
    t0: float
    events: EventLog
    ledger: Ledger
    shape: LoadShape
    admission: Admission
    surge: Admission
    wait: LogHistogram
    sojourn: LogHistogram
    measure_from: float  # seconds after t0
    callers: Callers


class Leadership(Protocol):
    """Dispatch as status, metrics, the report and the fault runtime read it."""

    @property
    def replicas(self) -> list[Agent]:
        """The orchestrator replicas, one of which holds the dispatch lease."""

    @property
    def leader_id(self) -> str | None:
        """The replica holding the lease; None while nobody holds it."""

    @property
    def elections(self) -> int:
        """Elections won so far; only ever grows."""

    @property
    def redispatched(self) -> int:
        """Tasks dispatched again (a leader's hand-over, an expired task lease); only ever grows."""

    @property
    def lease_expired(self) -> int:
        """Task leases that ran out; only ever grows."""

    @property
    def log_size(self) -> int:
        """Entries of the dispatch log this process holds (what the daemon's sizes report)."""


class Host(Protocol):
    """Where the agents run (tasks of this process, or processes) and what the runtime does around them."""

    @property
    def loss_needs_fault(self) -> bool:
        """Tasks leave their holders only through faults (so the loss walk may skip fault-free stretches)."""

    @property
    def remote_stages(self) -> bool:
        """Each worker keeps its own copy of every stage: the pipeline's memory stores and MCP clients serve
        no task, and breaking them would report damage nobody suffered."""

    def kill(self, agent: Agent) -> None:
        """Stop the agent now; the supervisor hears of it."""

    def start(self, agent: Agent) -> None:
        """Bring a dead agent back (the supervisor's restart, or a fault's revert)."""

    def held_tasks(self, ids: Collection[str]) -> int:
        """Tasks these workers hold in service right now."""

    def holders(self) -> Iterator[Task]:
        """Every task somebody answers for."""

    def health(self) -> str | None:
        """Why the backend cannot serve now, or None."""

    def running(self) -> AbstractAsyncContextManager[None]:
        """Run the agents for the body; stop them all after."""


class Assembly(Protocol):
    """The pipeline once built, as a host runs it: its agents, who restarts them, and the leader's beat."""

    events: EventLog
    queue: IngressQueue
    workers: list[Worker]
    producers: list[Producer]
    agents: dict[str, Agent]
    mcp: dict[str, McpConnection]
    supervisor: Supervisor

    def elapsed(self) -> float:
        """Seconds since the pipeline started."""

    def heartbeat(self, now: float) -> None:
        """The leader's beat: steer around open breakers, reroute a changed DAG, repair memory stores."""


@dataclass(frozen=True, slots=True)
class Parts(Generic[A_contra]):
    """What one backend supplies; ``worker`` and ``host`` are called once the pipeline holds the rest (a worker
    walks the route ``Routing`` holds; the host is handed the pipeline, seen as ``A_contra``)."""

    queue: IngressQueue
    busy: BusyMeter
    dispatcher: Leadership
    producers: Sequence[Producer]
    worker: Callable[[Agent, Routing], Worker]
    host: Callable[[A_contra], Host]


def orchestrators(settings: Settings) -> list[Agent]:
    """The orchestrator replicas the settings ask for."""
    return [Agent(f"orchestrator-{i}", "orchestrator") for i in range(settings.orchestrator.replicas)]


def producers(kind: type[P], core: Core, queue: IngressQueue) -> list[P]:
    """One producer per agent, each offering an equal share of the load from its own arrival stream; task ids
    come from one counter."""
    load = core.settings.load
    streams = Streams(core.settings.seed)
    ids = itertools.count(1)
    core.callers.ids = ids.__next__  # a caller's retries are tasks too, numbered with the first attempts
    n = load.producers
    return [
        kind(
            share=1.0 / n,
            shape=core.shape,
            arrival=load.arrival,
            burst_size=load.burst_size,
            rng=streams.stream(f"arrivals:{i}"),
            agent=Agent(f"producer-{i}", "producer"),
            queue=queue,
            ledger=core.ledger,
            admission=core.admission,
            surge=core.surge,
            clock=core.clock,
            ids=ids,
            t0=core.t0,
            measure_from=core.t0 + core.measure_from,
            phase=i / n,
            callers=core.callers,
        )
        for i in range(n)
    ]
