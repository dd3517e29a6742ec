"""The incidents of one runtime: which one a fault joins, what users felt in each, and each booked at its verdict."""

from __future__ import annotations

from collections.abc import Iterable

from chaosd.core.history import Kept
from chaosd.events.log import EventLog
from chaosd.faults.catalogue import is_remedy
from chaosd.faults.incidents import Incident, IncidentBook, Unplanned
from chaosd.faults.record import FaultRecord, impact_between
from chaosd.faults.runtime import Readings

__all__ = ["IncidentRegistry"]


class IncidentRegistry:
    """Keeps the newest ``keep`` incidents (older ones are in storage, and in the books), counts the impact of each
    from the runtime's task tally, and books an incident once its last verdict is in (telling an unplanned one's as
    an event)."""

    def __init__(self, runtime: Readings, events: EventLog, keep: int) -> None:
        self._rt = runtime
        self._events = events
        self.incidents: Kept[Incident] = Kept(keep)
        self.book = IncidentBook()  # every incident
        self.books: list[IncidentBook] = []  # those of the open plans and windows

    def tally(self) -> tuple[int, ...]:
        """Counts so far by kind (see ``IMPACT_KINDS``): a fault's impact is the difference of two tallies."""
        rt = self._rt
        total = rt.ledger.total
        corrupted = sum(store.undetected_reads for store in rt.memory.values())
        return total.late, total.failed, total.rejected, total.degraded, rt.audit.total.count, corrupted

    def join(self, record: FaultRecord) -> None:
        """Injected while another fault is still active or recovering: one incident, judged together."""
        last = self.incidents.last()
        if is_remedy(record.action):  # an instantaneous remedy, not a blow of its own
            record.join(self.incidents.total)
            return
        if last is not None and last.open:
            incident = last
            incident.join(record)
        else:
            incident = Incident(
                self.incidents.total + 1, [record], tally_from=record.tally_from, tasks=dict(record.impact_tasks)
            )
            self.incidents.append(incident)
        record.join(incident.id)

    def open_unplanned(self, own: Unplanned, tally_from: tuple[int, ...], impact_s: float) -> Incident:
        """An incident nobody injected, counted from ``tally_from``; ``impact_s``: the seconds that led to it."""
        incident = Incident(
            self.incidents.total + 1,
            tally_from=tally_from,
            unplanned=own,
            tasks=impact_between(tally_from, self.tally()),
            impact_s=impact_s,
        )
        self.incidents.append(incident)
        return incident

    def _of(self, record: FaultRecord) -> Incident | None:
        """The incident the fault counts in (a remedy counts in none)."""
        if is_remedy(record.action):
            return None
        return self.incidents.get(record.incident)

    def count_impact(self, record: FaultRecord, tally: tuple[int, ...]) -> None:
        """What users felt so far: the fault's own while it is active, its incident's until the verdict."""
        record.count_impact(tally)
        if record.incident and (incident := self._of(record)) is not None:
            incident.count_impact(tally)

    def felt(self, numbers: Iterable[int], seconds: float) -> None:
        """These incidents were out of tolerance for ``seconds`` (0: a resume with no incident before it)."""
        for number in numbers:
            if (incident := self.incidents.get(number)) is not None:
                incident.felt(seconds)

    def stalled(self, numbers: Iterable[int], seconds: float) -> None:
        """These incidents were open through ``seconds`` the host perturbed."""
        for number in numbers:
            if (incident := self.incidents.get(number)) is not None:
                incident.stall(seconds)

    def settled(self, record: FaultRecord, now: float) -> None:
        """A fault's verdict is in: its incident is booked if that was its last pending one."""
        incident = self._of(record)
        if incident is not None and record in incident.members and not incident.open:
            self.close(incident, now)

    def close(self, incident: Incident, now: float) -> None:
        """An incident's last verdict: counted in the books; an unplanned one's told as an event."""
        for book in (self.book, *self.books):
            book.add(incident)
        if (own := incident.unplanned) is None:
            return
        outcome = incident.outcome
        if outcome == "recovered":
            phases, predicted = incident.explained()
            self._events.record(
                now,
                "incident",
                about=incident,
                id=incident.id,
                state="recovered",
                recovery_s=incident.recovery_s,
                cause=own.cause,
                phases=phases,
                prediction=predicted,
            )
        elif outcome != "recovering":
            self._events.record(now, "incident", about=incident, id=incident.id, state=outcome, cause=own.cause)
