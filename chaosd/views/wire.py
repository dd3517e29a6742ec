"""What the daemon and its clients agree on, importable without the engine.

A client command (``chaosd inject``, ``chaosd faults`` …) imports only this, the standard library and the
duration parser: not the pipeline, numpy, aiohttp or the config models, which cost about a second of CPU
to import and which it never uses.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

__all__ = [
    "MAX_WAIT_S",
    "PENDING",
    "STATES",
    "TERMINAL",
    "FaultClock",
    "FaultOutcome",
    "FaultState",
    "IncidentOutcome",
    "Pending",
    "RevertCause",
    "RevertedBy",
    "Verdict",
    "is_loopback",
]

Pending = Literal["active", "recovering"]  # a fault not judged yet
Verdict = Literal["recovered", "failed", "unmeasured"]  # a fault's verdict
FaultState = Literal[Pending, Verdict]  # active → recovering → a verdict (a fault may recover while active)
# As stored and served: a run that ended unfinished leaves its faults without a verdict, so storage marks them.
FaultOutcome = Literal[FaultState, "aborted"]
IncidentOutcome = Literal["recovering", "recovered", "failed", "unmeasured"]

# What ended a fault: its TTL, a revert, the safety lever, the daemon's shutdown, or storage that could not
# record it (the fault is undone rather than left unrecorded).
RevertCause = Literal["ttl", "revert", "lever", "shutdown", "unstored"]
RevertedBy = Literal[RevertCause, "aborted"]  # as stored: storage's, for a fault still active when its run ended

FaultClock = Literal["heal", "restore"]  # timed from injection (a mechanism heals it), or from when it was lifted

PENDING: tuple[Pending, ...] = ("active", "recovering")
TERMINAL: tuple[Verdict, ...] = ("recovered", "failed", "unmeasured")
STATES: tuple[FaultState, ...] = (*PENDING, *TERMINAL)
MAX_WAIT_S = 120.0  # the longest a request may wait for a fault's verdict (GET /api/v1/faults/{id}?wait=)


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1): where the API may listen without a token."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
