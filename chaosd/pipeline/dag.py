"""The workflow graph tasks walk: stages as nodes, preferred successors as edges; mutable, rerouted on change."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from chaosd.config import StageConfig

__all__ = ["Dag"]


class Dag:
    """Stages and their successors. Without any ``next`` in the config, stages form a chain in list order.

    A route runs from the first stage to a terminal one (a stage configured without successors),
    taking the first successor, in order of preference, from which a terminal is still reachable.
    """

    def __init__(self, stages: Sequence[StageConfig]) -> None:
        names = [s.name for s in stages]
        self.entry = names[0]
        if any(s.next is not None for s in stages):
            self.edges = {s.name: tuple(s.next or ()) for s in stages}
        else:
            self.edges = {a: (b,) for a, b in itertools.pairwise(names)} | {names[-1]: ()}
        self.removed_nodes: set[str] = set()
        self.removed_edges: set[tuple[str, str]] = set()

    def has_node(self, name: str) -> bool:
        return name in self.edges

    def has_edge(self, a: str, b: str) -> bool:
        return b in self.edges.get(a, ())

    def route(self, avoid: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
        """The preferred path through what is left of the graph, or None when no path remains.

        ``avoid`` (stages whose breaker is open) is steered around when another path exists.
        """
        if avoid:
            around = self._walk(self.entry, avoid)
            if around is not None:
                return around
        return self._walk(self.entry, frozenset())

    def _walk(self, node: str, avoid: frozenset[str]) -> tuple[str, ...] | None:
        if node in self.removed_nodes or node in avoid:
            return None
        successors = self.edges[node]
        if not successors:
            return (node,)
        for nxt in successors:
            if (node, nxt) in self.removed_edges:
                continue
            rest = self._walk(nxt, avoid)
            if rest is not None:
                return (node, *rest)
        return None
