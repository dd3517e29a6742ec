"""How long this process waited for a CPU: the host's share of a real-time run's figures.

A process that is runnable but not running (other processes hold the CPUs) serves nothing meanwhile, yet its
timers fire only slightly late, so tick lateness does not show it. Linux counts that wait per task in
``/proc/self/schedstat`` (its second field, the run-queue delay in nanoseconds); one ``pread`` per tick reads it.
Elsewhere, and in virtual time, the wait is 0.
"""

from __future__ import annotations

import os

__all__ = ["CpuWait"]

_PATH = "/proc/thread-self/schedstat"  # the loop's own thread: the daemon's other threads do not serve tasks


class CpuWait:
    """``take()``: seconds the loop's thread waited on a run queue since the previous call (0 if unknown)."""

    __slots__ = ("_fd", "_last")

    def __init__(self, enabled: bool = True) -> None:
        self._fd: int | None = None
        self._last = 0
        if not enabled:
            return
        try:
            self._fd = os.open(_PATH, os.O_RDONLY)
            self._last = self._read()
        except (OSError, ValueError, IndexError):
            self.close()

    def _read(self) -> int:
        assert self._fd is not None
        return int(os.pread(self._fd, 128, 0).split()[1])

    def take(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            now = self._read()
        except (OSError, ValueError, IndexError):
            self.close()
            return 0.0
        waited, self._last = now - self._last, now
        return max(0, waited) / 1e9

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
