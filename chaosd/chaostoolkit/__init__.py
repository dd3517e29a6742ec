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
from typing import Protocol

from chaosd import __version__

__all__ = ["discover"]


class _Discovery(Protocol):
    """What this extension calls of ``chaoslib.discovery`` (results are JSON: chaoslib's own types say no more)."""

    def initialize_discovery_result(
        self, extension_name: str, extension_version: str, discovery_type: str
    ) -> dict[str, object]: ...

    def discover_actions(self, extension_mod_name: str) -> list[dict[str, object]]: ...

    def discover_probes(self, extension_mod_name: str) -> list[dict[str, object]]: ...


def discover(discover_system: bool = True) -> dict[str, object]:
    """Chaos Toolkit's discovery entry point: every action and probe this extension offers."""
    discovery: _Discovery = importlib.import_module("chaoslib.discovery")  # Chaos Toolkit is an optional dependency
    result = discovery.initialize_discovery_result("chaosd", __version__, "chaosd")
    result["activities"] = [  # chaoslib starts the list empty
        *discovery.discover_actions("chaosd.chaostoolkit.actions"),
        *discovery.discover_probes("chaosd.chaostoolkit.probes"),
    ]
    return result
