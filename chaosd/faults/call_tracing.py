"""The seam for tracing the calls a fault proxy relays: the proxy calls these hooks for a request that carries a
W3C ``traceparent``; the tracing exporter implements them (``chaosd.exporters.tracing``)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["CallTracer"]


class CallTracer(Protocol):
    def call_started(self, header: str, dependency: str, method: str, path: str, host: str, port: int) -> object | None:
        """A span for one relayed call to ``host:port``, a child of the caller's span the ``traceparent`` header
        names; None when it is malformed or not sampled (the call is then relayed untraced, its header as it came)."""
        ...

    def call_header(self, handle: object) -> str:
        """The ``traceparent`` to send upstream: the relayed call's own span as the parent."""
        ...

    def call_ended(self, handle: object, status: int | None, faults: tuple[str, ...], error: str | None) -> None:
        """The call's end: the status the client got (None when it got none: a reset, a hang cut off), the fault
        actions that acted on it, and what went wrong, if anything."""
        ...
