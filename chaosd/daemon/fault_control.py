"""Faults and the safety lever on the live experiment, as the API asks for them; and waiting for their verdicts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from chaosd.daemon.gate import Gate
from chaosd.events.log import Event
from chaosd.experiment.runner import Experiment
from chaosd.faults import FaultRecord
from chaosd.faults.injector import matches
from chaosd.views import FaultsBody
from chaosd.views.wire import TERMINAL

__all__ = ["FaultControl"]


class FaultControl:
    """Injects, reverts and lists the live experiment's faults, and pulls or releases its lever."""

    def __init__(self, experiment: Experiment, gate: Gate) -> None:
        self._exp = experiment
        self._gate = gate

    def inject(
        self,
        action: str,
        target: str | None,
        params: dict[str, object],
        ttl: float | None,
        labels: dict[str, str] | None = None,
    ) -> FaultRecord:
        self._gate.check()
        return self._exp.injector.inject(action, target, params, ttl, labels)

    def revert(self, fault_id: int) -> FaultRecord:
        return self._exp.injector.revert(fault_id)

    def revert_matching(self, labels: dict[str, str], actions: frozenset[str]) -> list[FaultRecord]:
        return self._exp.injector.revert_matching(labels, actions)

    def take_back(self, record: FaultRecord) -> None:
        """Revert a fault whose injection was not stored (the request is answered 503, as if never made)."""
        if record.active:
            self._exp.injector.revert(record.id, why="unstored")

    def get(self, fault_id: int) -> FaultRecord:
        """A fault kept in memory (history.faults), or a 404 on ``id``."""
        return self._exp.injector.get(fault_id)

    def forgotten(self, fault_id: int) -> bool:
        """Injected in this run but older than the faults kept in memory: only storage still holds it."""
        injector = self._exp.injector
        return injector.faults.get(fault_id) is None and 0 < fault_id <= injector.injected

    def select(
        self, active: bool | None, labels: dict[str, str], actions: frozenset[str], states: frozenset[str]
    ) -> FaultsBody:
        """The faults kept in memory (the newest history.faults) that are (not) ``active`` and the selector picks."""
        injector = self._exp.injector
        records: list[FaultRecord] = list(injector.faults)
        if active is not None:
            records = [f for f in records if f.active == active]
        if labels or actions or states:
            records = [f for f in records if matches(f, labels, actions, states)]
        return {
            "faults": [f.as_dict() for f in records],
            "lever": injector.lever,
            "injected": injector.injected,
            "first_in_memory": injector.faults.first_kept,
        }

    async def await_verdicts(self, fault_ids: Collection[int], timeout: float) -> None:
        """Until each fault has its verdict, woken by the verdict events themselves; or ``timeout`` seconds."""
        # Looked up among the faults in play, never by id in the memory window: a fault without its verdict
        # may have left it (history.faults), and is still awaited.
        wanted = set(fault_ids)
        pending = {f.id for f in self._exp.injector.in_play if f.id in wanted and f.outcome not in TERMINAL}
        if not pending or timeout <= 0:
            return
        done = asyncio.Event()

        def on_event(event: Event) -> None:
            if event.kind == "fault" and event.data.get("state") in TERMINAL:
                pending.discard(event.data.get("id"))
                if not pending:
                    done.set()

        unsubscribe = self._exp.events.subscribe(on_event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout)
        finally:
            unsubscribe()

    @property
    def lever(self) -> str | None:
        """Why the safety lever is pulled; None while it is not."""
        return self._exp.injector.lever

    def restore_lever(self, reason: str | None) -> None:
        """Pulled again as it was, when its release was not stored (no fault got in meanwhile: same request)."""
        self._exp.injector.lever = reason

    def pull_lever(self, reason: str) -> int:
        return self._exp.injector.pull_lever(reason)

    def release_lever(self) -> None:
        self._gate.check()
        self._exp.injector.release_lever()
