"""The route: the DAG as the leader steers it around open breakers and removed nodes and edges, and the walk
workers read once per task."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chaosd.events.log import EventLog
from chaosd.pipeline.dag import Dag
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.switches import Switchboard
from chaosd.pipeline.worker import Walk

__all__ = ["Router"]


class Router:
    """Keeps the route the stages' breakers and the DAG's changes leave; workers read ``walk`` (``Routing``)."""

    def __init__(
        self,
        dag: Dag,
        stages: Mapping[str, StageRunner],
        events: EventLog,
        switches: Switchboard,
        origin: Callable[[], float],
    ) -> None:
        self.dag = dag
        self._stages = stages
        self._events = events
        self._switches = switches
        self._origin = origin  # the pipeline's t0 now (a backend may restart its clock once its processes are up)
        self.route_names: tuple[str, ...] | None = None
        self.bypassed: tuple[str, ...] = ()  # optional stages the route skips: tasks complete degraded
        self.walk: Walk | None = None  # the route as workers walk it, read by each once per task
        self.dirty = False  # the DAG changed since the last reroute
        self.avoided: frozenset[str] = frozenset()  # stages whose breaker is open
        self._reroute()

    def _reroute(self) -> None:
        found = self.dag.find(self.avoided)
        stages = self._stages
        if found is None:
            self.route_names, self.bypassed, self.walk = None, (), None
        else:
            self.route_names, self.bypassed = found.stages, found.bypassed
            self.walk = Walk(tuple(stages[n] for n in found.stages), tuple(stages[n] for n in found.bypassed))
        self.dirty = False

    def mark_changed(self) -> None:
        """The DAG changed; the leader reroutes on its next heartbeat."""
        self.dirty = True

    def update(self, now: float) -> None:
        """Steer around the breakers open at ``now`` (and half-open ones whose health check fails); reroute if
        that or the DAG changed."""
        walked = self.route_names or ()
        avoided: set[str] = set()
        for name, stage in self._stages.items():
            if stage.kind == "llm":  # an open llm breaker sends calls to the fallback model instead
                continue
            if stage.is_open(now):
                avoided.add(name)
            elif name in self.avoided and name not in walked and not stage.probe(now):
                avoided.add(name)  # half-open, and the health check failed: open again
        if avoided != self.avoided:
            self.avoided = frozenset(avoided)
            self.dirty = True
            self._events.record(now - self._origin(), "breaker", open=sorted(avoided))
        if self.dirty:
            before = (self.route_names, self.bypassed)
            self._reroute()
            if (self.route_names, self.bypassed) != before:  # a breaker with no way around it changes no route
                self._events.record(
                    now - self._origin(),
                    "dag",
                    state="rerouted",
                    route=list(self.route_names or ()),
                    bypassed=list(self.bypassed),
                )

    # --- what faults change (chaosd.faults.runtime.Runtime's DAG operations) ---------------------------

    def edges(self) -> tuple[tuple[str, str], ...]:
        return tuple((a, b) for a, successors in self.dag.edges.items() for b in successors)

    def remove_node(self, name: str, removed: bool) -> None:
        if removed:
            self.dag.removed_nodes.add(name)
        else:
            self.dag.removed_nodes.discard(name)
        stage = self._stages[name]
        stage.removed = removed
        stage.refresh()
        self.mark_changed()
        self._switches.switched("remove_node")

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        if removed:
            self.dag.removed_edges.add((a, b))
        else:
            self.dag.removed_edges.discard((a, b))
        self.mark_changed()
        self._switches.switched("remove_edge")

    def settled_route(self) -> tuple[str, ...] | None:
        return None if self.dirty else self.route_names
