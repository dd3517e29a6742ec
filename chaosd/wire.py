"""What the daemon and its clients agree on, importable without the engine.

A client command (``chaosd inject``, ``chaosd faults`` …) imports only this, the standard library and the
duration parser: not the pipeline, numpy, aiohttp or the config models, which cost about a second of CPU
to import and which it never uses.
"""

from __future__ import annotations

import ipaddress

__all__ = ["MAX_WAIT_S", "PENDING", "STATES", "TERMINAL", "is_loopback"]

PENDING = ("active", "recovering")  # a fault not judged yet
TERMINAL = ("recovered", "failed", "unmeasured")  # a fault's verdict
STATES = (*PENDING, *TERMINAL)
MAX_WAIT_S = 120.0  # the longest a request may wait for a fault's verdict (GET /api/v1/faults/{id}?wait=)


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1): where the API may listen without a token."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
