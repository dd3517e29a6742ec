"""The faults in play: applied and not reverted yet, or without a verdict yet, and how they end."""

from __future__ import annotations

from collections.abc import Sequence

from chaosd.events.log import EventLog
from chaosd.faults.catalogue import CATALOGUE, is_remedy
from chaosd.faults.incident_registry import IncidentRegistry
from chaosd.faults.record import FaultRecord
from chaosd.faults.runtime import Runtime
from chaosd.views.wire import PENDING, RevertCause

__all__ = ["ActiveFaults"]


class ActiveFaults:
    """What each tick works through: the faults still active or without a verdict (a fault may recover while still
    active), not every fault ever injected. A fault ends by hand, by a selector, all at once, or at its TTL."""

    def __init__(self, runtime: Runtime, registry: IncidentRegistry, events: EventLog) -> None:
        self._rt = runtime
        self._registry = registry
        self._events = events
        self._pending: list[FaultRecord] = []

    @property
    def in_play(self) -> Sequence[FaultRecord]:
        """Faults still active or without a verdict (read-only)."""
        return self._pending

    def active(self) -> list[FaultRecord]:
        return [f for f in self._pending if f.active]

    def quiet(self) -> bool:
        """Nothing in play but remedies (instantaneous, no blow of their own)."""
        return all(is_remedy(r.action) for r in self._pending)

    def add(self, record: FaultRecord) -> None:
        self._pending.append(record)

    def revert(self, record: FaultRecord, why: RevertCause) -> None:
        """Undo the fault on the runtime; its impact is counted up to now, and it recovers from here."""
        CATALOGUE[record.action].revert(self._rt, record.targets, record.params, record.memo)
        self._registry.count_impact(record, self._registry.tally())
        now = self._rt.elapsed()
        record.end(now, why)
        self._events.record(now, "fault", about=record, id=record.id, action=record.action, state="reverted", by=why)

    def expire(self, now: float) -> None:
        """Revert the faults whose TTL ran out by ``now``."""
        for record in self._pending:
            if record.active and now >= record.injected_at + record.ttl:
                self.revert(record, "ttl")

    def prune(self) -> None:
        """Let go of the faults reverted and judged."""
        self._pending = [r for r in self._pending if r.active or r.outcome in PENDING]
