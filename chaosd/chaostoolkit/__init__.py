"""A Chaos Toolkit extension for chaosd: actions and probes that drive a running daemon over its HTTP API.

Reference it from an experiment as a Python provider, e.g. ``{"type": "python", "module":
"chaosd.chaostoolkit.actions", "func": "inject_fault", "arguments": {"action": "kill_leader"}}``. The
daemon's address comes from the configuration key ``chaosd_addr``, else ``$CHAOSD_URL``, else
``http://127.0.0.1:8686``; its token from the secrets scope the activity names (key ``token``), else
``$CHAOSD_API__TOKEN`` as the ``chaosd`` client reads it, else none (a daemon without a token). ``chaos
discover chaosd`` lists the activities. See ``examples/chaostoolkit/`` and docs/chaostoolkit.md.
"""

from __future__ import annotations

import collections.abc
import importlib
import types
import typing
from typing import Protocol

from chaosd.core.version import __version__

__all__ = ["discover"]

_MODULES = ("chaosd.chaostoolkit.actions", "chaosd.chaostoolkit.probes")


class _Discovery(Protocol):
    """What this extension calls of ``chaoslib.discovery.discover`` (JSON results: chaoslib's types say no more)."""

    def initialize_discovery_result(
        self, extension_name: str, extension_version: str, discovery_type: str
    ) -> dict[str, object]: ...

    def discover_actions(self, extension_mod_name: str) -> list[dict[str, object]]: ...

    def discover_probes(self, extension_mod_name: str) -> list[dict[str, object]]: ...

    def portable_type_name(self, python_type: object) -> str: ...


def discover(discover_system: bool = True) -> dict[str, object]:
    """Chaos Toolkit's discovery entry point (``chaos discover chaosd`` reaches it through ``chaosd.discover``):
    every action and probe this extension offers, with its arguments and their types.

    ``system`` stays null whatever ``discover_system`` says: the daemon's state is what the probes read.
    """
    # Chaos Toolkit is an optional dependency. The module, not the package: only it has portable_type_name.
    discovery: _Discovery = importlib.import_module("chaoslib.discovery.discover")
    result = discovery.initialize_discovery_result("chaosd", __version__, "chaosd")
    actions, probes = _MODULES
    activities = [*discovery.discover_actions(actions), *discovery.discover_probes(probes)]
    for activity in activities:
        _type_arguments(discovery, activity)
    result["activities"] = activities  # chaoslib starts the list empty
    return result


def _type_arguments(discovery: _Discovery, activity: dict[str, object]) -> None:
    """Each argument's (and the return's) portable type from its resolved annotation: chaoslib reads annotations as
    written, which under postponed evaluation is text, so every one would be an ``object``. ``X | None`` is an X."""
    function = getattr(importlib.import_module(str(activity["mod"])), str(activity["name"]))
    hints = typing.get_type_hints(function)
    arguments = activity.get("arguments")
    for argument in arguments if isinstance(arguments, list) else []:
        hint = hints.get(argument["name"])
        if hint is not None:
            argument["type"] = discovery.portable_type_name(_plain(hint))
    if "return_type" in activity and "return" in hints:
        activity["return_type"] = discovery.portable_type_name(_plain(hints["return"]))


def _plain(hint: object) -> object:
    """The class chaoslib names for ``hint``: ``str | None`` → ``str``; ``dict[str, str]``, a Mapping → ``dict``;
    ``None`` (a return) → None."""
    if hint is type(None):
        return None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kept = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(kept) != 1:
            return hint  # several types: chaoslib names it an object
        hint = kept[0]
    origin = typing.get_origin(hint)
    if origin in (dict, collections.abc.Mapping):
        return dict
    if origin in (list, collections.abc.Sequence):
        return list
    return hint if origin is None else origin
