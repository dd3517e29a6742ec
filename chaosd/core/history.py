"""Bounded history: the newest entries of a long run in memory, with totals that count every entry ever.

A daemon runs for months; a list that grows per fault, per tick or per action is a leak. These keep
the newest ``limit`` entries (the rest is in storage, or only counted), and exact running sums.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from chaosd.views import PlanLogEntry

__all__ = ["Kept", "RecentLog", "Sum"]


class _HasId(Protocol):
    @property
    def id(self) -> int: ...


T = TypeVar("T", bound=_HasId)


class Kept(Generic[T]):
    """Entries with ids 1, 2, 3 … in order; the newest ``limit`` are kept, found by id in O(1).

    ``total`` counts every entry ever appended; ``len()`` is how many are kept.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit: must be at least 1 (got {limit})")
        self.limit = limit
        self.total = 0
        self._items: deque[T] = deque()

    def append(self, item: T) -> None:
        if item.id != self.total + 1:
            raise ValueError(f"id {item.id}: the next id is {self.total + 1}")
        self._items.append(item)
        self.total += 1
        if len(self._items) > self.limit:
            self._items.popleft()

    @property
    def first_kept(self) -> int:
        """The oldest id still in memory (``total + 1`` when none is)."""
        return self.total - len(self._items) + 1

    def get(self, item_id: int) -> T | None:
        index = item_id - self.first_kept
        return self._items[index] if 0 <= index < len(self._items) else None

    def last(self) -> T | None:
        return self._items[-1] if self._items else None

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Sum:
    """A running sum with Neumaier's compensation: as close to ``math.fsum`` of the values as a float allows."""

    __slots__ = ("_c", "_s", "count")

    def __init__(self) -> None:
        self._s = 0.0
        self._c = 0.0
        self.count = 0

    def add(self, x: float) -> None:
        t = self._s + x
        if abs(self._s) >= abs(x):
            self._c += (self._s - t) + x
        else:
            self._c += (x - t) + self._s
        self._s = t
        self.count += 1

    @property
    def value(self) -> float:
        return self._s + self._c

    @property
    def mean(self) -> float | None:
        return self.value / self.count if self.count else None


class RecentLog:
    """A plan's log: the newest ``limit`` entries, and how many succeeded in all."""

    def __init__(self, limit: int) -> None:
        self._entries: deque[PlanLogEntry] = deque(maxlen=limit)
        self.ok = 0  # entries with a true "ok" when they were logged (actions carried out)

    def append(self, entry: PlanLogEntry) -> None:
        self._entries.append(entry)
        if entry.get("ok"):
            self.ok += 1

    def newest(self, n: int) -> list[PlanLogEntry]:
        return list(self._entries)[-n:] if n > 0 else []

    def __iter__(self) -> Iterator[PlanLogEntry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
