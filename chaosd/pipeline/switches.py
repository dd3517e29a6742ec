"""The switchboard: each fault switch the pipeline flips, told to a backend whose agents must hear of it."""

from __future__ import annotations

from collections.abc import Callable, Collection

__all__ = ["Switchboard"]


class Switchboard:
    """Who hears of a switch (its name, and the agent or stage names it touched); in memory, nobody."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[str, Collection[str]], None]] = []

    def switched(self, switch: str, ids: Collection[str] = ()) -> None:
        for listener in self.listeners:
            listener(switch, ids)
