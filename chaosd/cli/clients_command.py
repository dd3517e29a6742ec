"""``chaosd clients``: the callers' policy in force on the running daemon, and ``chaosd clients set KEY=VALUE …``
to change some of its keys at run time (``PATCH /api/v1/clients``), as a configuration push would.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections.abc import Mapping, Sequence

from chaosd.cli.answers import as_array, as_object, as_text, json_text
from chaosd.cli.exits import EXIT_OK, EXIT_USAGE
from chaosd.cli.transport import Client, ClientError, Out, Subcommands

__all__ = ["add_clients_command", "assignments", "clients", "policy_lines", "toml_value"]

_PATH = "/api/v1/clients"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def add_clients_command(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """Register ``clients``; ``common`` holds the daemon's address and token."""
    p = sub.add_parser(
        "clients",
        parents=[common],
        help="show the callers' policy ([clients]) of the running daemon, or change keys of it: clients set KEY=VALUE",
        description="Show the callers' policy in force, as a [clients] table; `set` changes the keys given (the rest "
        "stay as they are), at once and recorded as a clients event. A VALUE is TOML: 0.5, 3, true, "
        '["timeout", "failed"], {ratio = 0.1}; bare text is a string (250ms); null restores the key\'s default.',
        epilog="examples:\n  chaosd clients\n  chaosd clients set timeout=0.5 retries=3 drop_expired=true "
        "budget.ratio=0.1\n  chaosd clients set budget=null patience.mean=2s",
    )
    p.add_argument("action", nargs="?", choices=("show", "set"), default="show", help="show (default) or set")
    p.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="set: the keys to change (budget.ratio=0.1)")
    p.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def clients(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    if args.action == "show":
        if args.assignments:
            raise ClientError(EXIT_USAGE, "clients: KEY=VALUE goes with set (chaosd clients set KEY=VALUE …)")
        policy = as_object(client.request("GET", _PATH))
        for line in [json_text(policy)] if args.json else policy_lines(policy):
            out(line)
        return EXIT_OK
    patch = assignments(args.assignments)
    try:
        answer = as_object(client.request("PATCH", _PATH, patch))
    except ClientError as exc:
        if exc.status in (400, 422):  # the daemon names the key and what is wrong with the value: the user's input
            raise ClientError(EXIT_USAGE, exc.detail) from None
        raise
    if args.json:
        out(json_text(answer))
        return EXIT_OK
    changed = [as_text(key) for key in as_array(answer["changed"])]
    out(f"changed: {', '.join(changed)}" if changed else "nothing changed")
    for line in policy_lines(as_object(answer["clients"])):
        out(line)
    return EXIT_OK


def assignments(items: Sequence[str]) -> dict[str, object]:
    """``KEY=VALUE`` items as a JSON merge patch: ``budget.ratio=0.1`` → ``{"budget": {"ratio": 0.1}}``."""
    if not items:
        raise ClientError(EXIT_USAGE, "clients set: give at least one KEY=VALUE (e.g. timeout=0.5)")
    patch: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        parts = key.strip().removeprefix("clients.").split(".")
        if not sep or not all(_KEY.fullmatch(part) for part in parts):
            raise ClientError(EXIT_USAGE, f"clients set: expected KEY=VALUE (e.g. retries=3), got {item[:80]!r}")
        table = patch
        for depth, part in enumerate(parts[:-1]):
            inner = table.setdefault(part, {})
            if not isinstance(inner, dict):
                raise ClientError(EXIT_USAGE, f"clients set: {'.'.join(parts[: depth + 1])} given twice")
            table = inner
        if parts[-1] in table:
            raise ClientError(EXIT_USAGE, f"clients set: {'.'.join(parts)} given twice")
        table[parts[-1]] = toml_value(text.strip())
    return patch


def toml_value(text: str) -> object:
    """``text`` read as a TOML value (0.5, 3, true, ["timeout"], {ratio = 0.1}); ``null`` as JSON's null; anything
    else, or what JSON cannot carry (a date, inf), as the text itself: the daemon names what is wrong with it."""
    if text == "null":
        return None
    try:
        value = tomllib.loads(f"value = {text}")["value"]
        json.dumps(value, allow_nan=False)
    except (tomllib.TOMLDecodeError, TypeError, ValueError):
        return text
    return value


def policy_lines(policy: Mapping[str, object]) -> list[str]:
    """The policy as the ``[clients]`` table of a config file (a key not set is a comment)."""
    return ["[clients]", *_lines(policy, "")]


def _lines(table: Mapping[str, object], prefix: str) -> list[str]:
    lines = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            lines += _lines(value, f"{prefix}{key}.")
        elif value is None:
            lines.append(f"# {prefix}{key}: not set")
        else:
            lines.append(f"{prefix}{key} = {_toml(value)}")
    return lines


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string
