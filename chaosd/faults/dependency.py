"""What acts on the calls through a dependency's fault proxy: the faults in force, a value swapped whole, and their
acting on each call (the random draws, the delays, the counts)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields

from chaosd.core.clock import LoopClock

__all__ = ["NO_FAULTS", "PIECE", "CallFaults", "DependencyFaults", "reset"]

PIECE = 256 * 1024  # the most read at once while copying

_INTS = ("error_status", "slice_bytes")
_PROBABILITIES = ("error_probability", "reset_probability")


@dataclass(frozen=True, slots=True)
class DependencyFaults:
    """What acts on the calls through one proxy now; immutable, swapped whole (``proxy.faults = new``)."""

    latency: float = 0.0  # seconds added: HTTP before each request is forwarded; TCP to each chunk sent back
    jitter: float = 0.0  # plus a uniform draw in [0, jitter]
    error_status: int = 0  # HTTP only: answer with this status instead of calling upstream (0 = off)
    error_probability: float = 1.0  # share of requests answered with error_status while it is on
    reset_probability: float = 0.0  # share of requests (HTTP) / connections (TCP) reset with a TCP RST
    timeout: bool = False  # hold: accept the request or connection and never answer
    slice_bytes: int = 0  # relay the response (HTTP body, TCP data sent back) in slices of this many bytes
    slice_delay: float = 0.0  # seconds between slices

    def __post_init__(self) -> None:
        for name in ("latency", "jitter", "slice_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0 (got {value!r})")
        for name in _PROBABILITIES:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1] (got {getattr(self, name)!r})")
        if self.error_status != 0 and not 100 <= self.error_status <= 599:
            raise ValueError(f"error_status must be 0 (off) or an HTTP status 100-599 (got {self.error_status!r})")
        if self.slice_bytes < 0:
            raise ValueError(f"slice_bytes must be >= 0 (got {self.slice_bytes!r})")

    def names(self) -> tuple[str, ...]:
        """The catalogue actions acting now, in catalogue order."""
        on = (
            ("dependency_latency", self.latency > 0 or self.jitter > 0),
            ("dependency_error", self.error_status > 0),
            ("dependency_reset", self.reset_probability > 0),
            ("dependency_timeout", self.timeout),
            ("dependency_slice", self.slice_bytes > 0),
        )
        return tuple(name for name, acting in on if acting)

    def merged(self, other: DependencyFaults) -> DependencyFaults:
        """These faults with every field ``other`` sets (differs from the default in) taken from ``other``."""
        return DependencyFaults.from_json({**self.as_json(), **other.as_json()})

    def as_json(self) -> dict[str, float]:
        """The fields that differ from the default, as numbers (``timeout`` as 1.0): for a stage document."""
        return {
            f.name: float(getattr(self, f.name))
            for f in fields(DependencyFaults)
            if getattr(self, f.name) != getattr(NO_FAULTS, f.name)
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> DependencyFaults:
        """Strict: an unknown field, a value of the wrong type or out of range is a ValueError naming the field.

        Integral floats are taken for the integer fields and 0/1 for ``timeout``, as :meth:`as_json` writes them.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown dependency fault field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        values: dict[str, float | int | bool] = {}
        for name, value in data.items():
            if (isinstance(value, bool) and name != "timeout") or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number (got {type(value).__name__})")
            if name == "timeout":
                if value not in (0, 1):
                    raise ValueError(f"timeout must be true/false or 1/0 (got {value!r})")
                values[name] = bool(value)
            elif name in _INTS:
                if not (math.isfinite(value) and value == int(value)):
                    raise ValueError(f"{name} must be a whole number (got {value!r})")
                values[name] = int(value)
            else:
                values[name] = float(value)
        return cls(**values)  # type: ignore[arg-type]  # names and types checked above


NO_FAULTS = DependencyFaults()


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0): the peer sees a connection reset, not an orderly end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _hold(reader: asyncio.StreamReader) -> None:
    """Never answer: read and drop what the client sends until it gives up (or the proxy stops)."""
    while await reader.read(PIECE):
        pass


class CallFaults:
    """The faults acting on one proxy's calls: ``faults`` is read at each request (HTTP) or at each connection and
    chunk (TCP), so assigning a new value acts on the next. ``calls`` counts requests (HTTP) or connections (TCP);
    ``faulted`` the calls each fault action acted on. Delays run on the clock of the loop the proxy serves on."""

    def __init__(self, rng: random.Random) -> None:
        self.faults = NO_FAULTS
        self.calls = 0
        self.faulted: dict[str, int] = {}
        self._rng = rng
        self._clock: LoopClock | None = None

    def serve_on(self, clock: LoopClock) -> None:
        """The clock delays run on: the loop the proxy listens on."""
        self._clock = clock

    def call(self) -> DependencyFaults:
        """A call begins (a request, or a TCP connection): counted, and the faults in force for it."""
        self.calls += 1
        return self.faults

    def count(self, action: str) -> None:
        self.faulted[action] = self.faulted.get(action, 0) + 1

    def chance(self, probability: float) -> bool:
        return probability >= 1.0 or self._rng.random() < probability

    def delay(self, faults: DependencyFaults) -> float:
        return faults.latency + (self._rng.uniform(0.0, faults.jitter) if faults.jitter > 0 else 0.0)

    async def sleep(self, seconds: float) -> None:
        assert self._clock is not None
        await self._clock.sleep(seconds)

    def due(self, faults: DependencyFaults) -> float:
        """When a chunk delayed by ``faults`` from now is due."""
        assert self._clock is not None
        return self._clock.now() + self.delay(faults)

    async def sleep_until(self, due: float) -> None:
        assert self._clock is not None
        await self._clock.sleep_until(due)

    def sender(self, writer: asyncio.StreamWriter, faults: DependencyFaults) -> Callable[[bytes], Awaitable[None]]:
        """What writes a response body to the client: at once, or in slices of ``slice_bytes`` apart in time."""
        if faults.slice_bytes <= 0:

            async def send(data: bytes) -> None:
                writer.write(data)
                await writer.drain()

            return send
        step, pause = faults.slice_bytes, faults.slice_delay
        started = False

        async def send_sliced(data: bytes) -> None:
            nonlocal started
            view = memoryview(data)
            for i in range(0, len(view), step):
                if started and pause > 0:
                    await self.sleep(pause)
                started = True
                writer.write(view[i : i + step])
                await writer.drain()

        return send_sliced

    async def cut(self, faults: DependencyFaults, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """The faults that end a call before it reaches the upstream, HTTP or TCP alike: a timeout holds it open
        unanswered until the caller gives up, a reset drops it. True if one did."""
        if faults.timeout:
            self.count("dependency_timeout")
            await _hold(reader)
            return True
        if faults.reset_probability > 0 and self.chance(faults.reset_probability):
            self.count("dependency_reset")
            reset(writer)
            return True
        return False
