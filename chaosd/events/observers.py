"""Who watches the flight recorder: subscribers that see each event as it is recorded, and the guard that keeps an
observer that raises from crashing what it observes.

A subscriber (or a telemetry listener guarded by :meth:`Observers.guard`) that raises is logged once per observer
and kind of error, counted in ``observer_errors`` (``chaosd_observer_errors_total{observer}``), and kept subscribed.
Unlike trio's instruments, which are removed on their first error, a raising observer stays: the history writer is
one, and one bad event must not cost every later event's record (the count shows it keeps failing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from chaosd.events.history import Event

__all__ = ["MAX_OBSERVER_NAMES", "Observers", "Subscribers", "observer_name"]

# The flight recorder's logger, under the name it has always had: logging configurations select it by name.
log = logging.getLogger("chaosd.events.log")
_A = TypeVar("_A")
MAX_OBSERVER_NAMES = 32  # the metric's label values: beyond this many observers, "other"


def observer_name(callback: Callable[..., object]) -> str:
    """A short, stable name for a callback: its qualified name without the ``<locals>`` noise."""
    name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
    return str(name).replace("<locals>.", "")


class Observers:
    """Calls observers so that one that raises is logged (bounded), counted, and never fatal."""

    def __init__(self) -> None:
        self.errors: dict[str, int] = {}  # by observer name, at most MAX_OBSERVER_NAMES + 1 keys
        self._logged: set[tuple[str, type[BaseException]]] = set()

    def call(self, name: str, callback: Callable[[_A], None], arg: _A) -> None:
        try:
            callback(arg)
        except Exception as exc:  # an observer's failure is its own, never its caller's
            self.failed(name, exc)

    def failed(self, name: str, exc: Exception) -> None:
        if name not in self.errors and len(self.errors) >= MAX_OBSERVER_NAMES:
            name = "other"
        self.errors[name] = self.errors.get(name, 0) + 1
        key = (name, type(exc))
        if key not in self._logged:  # once per observer and kind of error: bounded log volume
            self._logged.add(key)
            log.error(
                "observer %s raised %s (kept subscribed; further %s errors from it are only counted)",
                name,
                type(exc).__name__,
                type(exc).__name__,
                exc_info=exc,
            )

    def guard(self, callback: Callable[[_A], None], name: str | None = None) -> Callable[[_A], None]:
        """``callback`` wrapped so that it never raises into its caller (for listeners kept elsewhere)."""
        label = name or observer_name(callback)

        def guarded(arg: _A) -> None:
            self.call(label, callback, arg)

        return guarded


class Subscribers:
    """The callbacks that see each event as it is recorded, in the order they subscribed, each through
    :class:`Observers` so that one that raises is only counted."""

    def __init__(self, observers: Observers) -> None:
        self._observers = observers
        self._entries: list[tuple[str, Callable[[Event], None]]] = []

    def subscribe(self, callback: Callable[[Event], None], name: str | None = None) -> Callable[[], None]:
        """Add ``callback``; what is returned removes it."""
        entry = (name or observer_name(callback), callback)
        self._entries.append(entry)
        return lambda: self._entries.remove(entry)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._entries]

    def publish(self, event: Event) -> None:
        # A copy: a subscriber may unsubscribe (itself or another) while it is called.
        for name, subscriber in list(self._entries):
            self._observers.call(name, subscriber, event)
