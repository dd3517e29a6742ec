"""A Chaos Toolkit extension for chaosd: actions and probes that drive a running daemon over its HTTP API.

Reference it from an experiment as a Python provider, e.g. ``{"type": "python", "module":
"chaosd.chaostoolkit.actions", "func": "inject_fault", "arguments": {"action": "kill_leader"}}``. The
daemon's address comes from the configuration key ``chaosd_addr``, else ``$CHAOSD_URL``, else
``http://127.0.0.1:8686``; its token from the secrets scope the activity names (key ``token``), else
``$CHAOSD_API__TOKEN`` as the ``chaosd`` client reads it, else none (a daemon without a token). ``chaos
discover chaosd`` lists the activities. See ``examples/chaostoolkit/`` and docs/chaostoolkit.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from chaosd import __version__

__all__ = ["discover"]


def discover(discover_system: bool = True) -> dict[str, Any]:
    """Chaos Toolkit's discovery entry point: every action and probe this extension offers."""
    discovery: Any = importlib.import_module("chaoslib.discovery")  # Chaos Toolkit is an optional dependency
    result: dict[str, Any] = discovery.initialize_discovery_result("chaosd", __version__, "chaosd")
    result["activities"].extend(discovery.discover_actions("chaosd.chaostoolkit.actions"))
    result["activities"].extend(discovery.discover_probes("chaosd.chaostoolkit.probes"))
    return result
