"""What stages depend on: a checksummed memory store and an MCP connection that reconnects with backoff."""

from __future__ import annotations

import asyncio
import random
import zlib
from collections.abc import Iterable

from chaosd.config.settings import BackoffConfig
from chaosd.core.clock import Clock
from chaosd.events.log import EventLog
from chaosd.pipeline.backoff import backoff_delay

__all__ = ["McpConnection", "MemoryStore"]


def _checksum(value: bytes) -> int:
    return zlib.crc32(value)


class MemoryStore:
    """Entries with checksums; corruption is caught on read or by a scrub and restored from the checkpoint."""

    def __init__(self, name: str, entries: int, checksums: bool, rng: random.Random) -> None:
        self.name = name
        self.checksums = checksums
        self._rng = rng
        self._checkpoint = [f"{name}:{i}".encode() for i in range(entries)]
        self.values = list(self._checkpoint)
        self._sums = [_checksum(v) for v in self.values]
        self.corrupted: set[int] = set()
        self.repaired = 0
        self.undetected_reads = 0

    def corrupt(self, count: int) -> list[int]:
        """Silently change ``count`` entries (checksums untouched); returns their indexes."""
        candidates = [i for i in range(len(self.values)) if i not in self.corrupted]
        picked = sorted(self._rng.sample(candidates, min(count, len(candidates))))
        self.corrupt_entries(picked)
        return picked

    def corrupt_entries(self, entries: Iterable[int]) -> None:
        """Silently change these entries (those not corrupted already, and in range): a Redis worker's copy of
        the store gets the entries the daemon picked."""
        for i in entries:
            if 0 <= i < len(self.values) and i not in self.corrupted:
                self.values[i] = b"\x00corrupt:" + self.values[i]
                self.corrupted.add(i)

    def check(self, i: int) -> str:
        """Read entry ``i``: ``ok``, ``detected`` (bad checksum: restore it) or ``undetected`` (bad, unseen)."""
        if i not in self.corrupted:
            return "ok"
        if self.checksums:
            return "detected"
        self.undetected_reads += 1
        return "undetected"

    def restore(self, i: int) -> None:
        self.values[i] = self._checkpoint[i]
        self.corrupted.discard(i)
        self.repaired += 1

    def read(self, u: float, restore_time: float) -> float:
        """A memory stage's read of the entry at ``u`` (uniform in [0, 1): an entry at random, in one C call rather
        than randrange's two): ``restore_time`` when it was corrupt and is restored first, else 0."""
        i = int(u * len(self.values))
        if self.check(i) == "detected":
            self.restore(i)
            return restore_time
        return 0.0

    def scrub(self) -> int:
        """Verify every checksum and restore what fails; returns how many were repaired."""
        if not self.checksums:
            return 0
        bad = [i for i in sorted(self.corrupted) if _checksum(self.values[i]) != self._sums[i]]
        for i in bad:
            self.restore(i)
        return len(bad)


class McpConnection:
    """A connection to an MCP server; when it drops, a reconnect loop retries with backoff."""

    def __init__(self, name: str, backoff: BackoffConfig, clock: Clock, rng: random.Random, events: EventLog) -> None:
        self.name = name
        self.connected = True
        self.server_up = True
        self.reconnected_at: float | None = None
        self._backoff = backoff
        self._clock = clock
        self._rng = rng
        self._events = events
        self._lost = asyncio.Event()
        self._up_at: float | None = None  # when an outage ends by itself
        self.outage: float | None = None  # the last drop's outage (a Redis daemon tells its workers)
        self._t0 = clock.now()

    def drop(self, outage: float | None = None) -> None:
        """Lose the connection; the server is unreachable for ``outage`` seconds (None: until it is brought up)."""
        self.connected = False
        self.server_up = False
        self._up_at = None if outage is None else self._clock.now() + outage
        self.outage = outage
        self.reconnected_at = None
        self._lost.set()

    def _reachable(self) -> bool:
        if not self.server_up and self._up_at is not None and self._clock.now() >= self._up_at:
            self.server_up = True
        return self.server_up

    async def run(self) -> None:
        while True:
            await self._lost.wait()
            attempt = 0
            while not self.connected:
                attempt += 1
                await self._clock.sleep(backoff_delay(self._backoff, attempt, self._rng))
                if self._reachable():
                    self.connected = True
                    self.reconnected_at = self._clock.now() - self._t0
                    self._events.record(self.reconnected_at, "mcp", stage=self.name, state="reconnected")
            self._lost.clear()
