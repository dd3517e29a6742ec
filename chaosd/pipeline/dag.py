"""The workflow graph tasks walk: stages as nodes, preferred successors as edges; mutable, rerouted on change."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from chaosd.config.settings import StageConfig

__all__ = ["Dag", "Route"]


@dataclass(frozen=True, slots=True)
class Route:
    """A path through the graph: the stages walked, in order, and the optional ones skipped on the way."""

    stages: tuple[str, ...]
    bypassed: tuple[str, ...] = ()


class Dag:
    """Stages and their successors. Without any ``next`` in the config, stages form a chain in list order.

    A route runs from the first stage to a terminal one (a stage configured without successors),
    taking the first successor, in order of preference, from which a terminal is still reachable.
    A removed optional stage does not cut the graph: the route skips it, going from its predecessor
    straight on to one of its successors. Skipping costs the task its result, so a route that skips
    fewer stages wins over the preferred order: an alternate path is taken before a bypass.
    """

    def __init__(self, stages: Sequence[StageConfig]) -> None:
        names = [s.name for s in stages]
        self.entry = names[0]
        if any(s.next is not None for s in stages):
            self.edges = {s.name: tuple(s.next or ()) for s in stages}
        else:
            self.edges = {a: (b,) for a, b in itertools.pairwise(names)} | {names[-1]: ()}
        self.optional = frozenset(s.name for s in stages if s.optional)
        self.removed_nodes: set[str] = set()
        self.removed_edges: set[tuple[str, str]] = set()

    def has_node(self, name: str) -> bool:
        return name in self.edges

    def has_edge(self, a: str, b: str) -> bool:
        return b in self.edges.get(a, ())

    def route(self, avoid: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
        """The stages of :meth:`find`'s route, or None when no path remains."""
        found = self.find(avoid)
        return None if found is None else found.stages

    def find(self, avoid: frozenset[str] = frozenset()) -> Route | None:
        """The preferred path through what is left of the graph, or None when no path remains.

        ``avoid`` (stages whose breaker is open) is steered around, or skipped when optional, when
        that leaves a path; otherwise the route goes through them.
        """
        if avoid:
            around = self._best(avoid)
            if around is not None:
                return around
        return self._best(frozenset())

    def _best(self, avoid: frozenset[str]) -> Route | None:
        down = self.removed_nodes | avoid
        best: dict[str, Route | None] = {}

        def visit(node: str) -> Route | None:
            if node in best:
                return best[node]
            found: Route | None = None
            if node not in down or node in self.optional:
                successors = self.edges[node]
                tail: Route | None = Route(()) if not successors else None
                for nxt in successors:
                    if (node, nxt) in self.removed_edges:
                        continue
                    rest = visit(nxt)
                    if rest is not None and (tail is None or len(rest.bypassed) < len(tail.bypassed)):
                        tail = rest
                if tail is not None:
                    if node in down:
                        found = Route(tail.stages, (node, *tail.bypassed))
                    else:
                        found = Route((node, *tail.stages), tail.bypassed)
            best[node] = found
            return found

        found = visit(self.entry)
        # Every stage skipped: nothing would serve the task, which is no route at all.
        return found if found is not None and found.stages else None
