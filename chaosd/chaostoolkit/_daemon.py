"""The daemon an activity talks to.

Its address: the configuration key ``chaosd_addr``, else ``$CHAOSD_URL`` (or the older ``$CHAOSD_ADDR``), else
``http://127.0.0.1:8686``. Its token: ``token`` in the secrets scope the activity names, else the environment the
``chaosd`` client reads (``$CHAOSD_API__TOKEN``, ``$CHAOSD_TOKEN``, the file ``$CHAOSD_API__TOKEN_FILE``), else
none: a daemon without ``api.token`` is sent no Authorization header.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping

from chaosd.cli.client import Client, ClientError, await_verdict, daemon_address, environment_token, selector

__all__ = [
    "ActivityFailed",
    "Configuration",
    "Daemon",
    "Secrets",
    "array",
    "daemon",
    "integer",
    "json_object",
    "number",
    "objects",
    "query",
]

# What Chaos Toolkit passes an activity: the experiment's configuration, and the secrets scope it names
# (chaoslib's own types for them are plain dicts of JSON values).
Configuration = Mapping[str, object]
Secrets = Mapping[str, object]

CONFIG_KEY = "chaosd_addr"
_HINT = f"set the experiment's configuration key {CONFIG_KEY} or CHAOSD_URL"


class ActivityFailed(Exception):
    """Raised so Chaos Toolkit records the activity as failed, with the daemon's own message."""


def daemon(configuration: Configuration | None, secrets: Secrets | None) -> Daemon:
    configured = (configuration or {}).get(CONFIG_KEY)
    secret = (secrets or {}).get("token")
    try:
        if configured:
            addr, source = str(configured), f"configuration {CONFIG_KEY}"
        else:
            addr, source = daemon_address(None, None, None, os.environ)
        token = str(secret) if secret else environment_token(os.environ)
        return Daemon(Client(addr, token, source=source, hint=_HINT))
    except ClientError as exc:
        raise ActivityFailed(f"chaosd: {exc.message}") from None


def query(labels: Mapping[str, str] | None = None, actions: list[str] | None = None) -> str:
    """The fault selector as a query string (see :func:`chaosd.cli.client.selector`)."""
    return urllib.parse.urlencode(selector(labels or {}, actions or ()))


class Daemon:
    """chaosd's own client, its refusals turned into the failures Chaos Toolkit records."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def request(self, method: str, path: str, body: object = None) -> object:
        try:
            return self.client.request(method, path, body)
        except ClientError as exc:
            raise ActivityFailed(f"chaosd: {exc.message}") from None

    def answer(self, method: str, path: str, body: object = None) -> dict[str, object]:
        """:meth:`request`, for the JSON object every answer of docs/api.md is."""
        return json_object(self.request(method, path, body))

    def wait_for_verdict(self, fault_id: int, wait: float) -> dict[str, object]:
        """The fault once it has its verdict, or as it is after ``wait`` seconds (the API's long poll)."""
        try:
            return await_verdict(self.client, self.answer("GET", f"/api/v1/faults/{fault_id}"), wait)
        except ClientError as exc:
            raise ActivityFailed(f"chaosd: {exc.message}") from None


# --- reading answers: a value not in docs/api.md's shape fails the activity, saying what came instead ----------------


def _unexpected(expected: str, value: object) -> ActivityFailed:
    return ActivityFailed(f"chaosd: unexpected answer: expected {expected}, got {type(value).__name__}")


def json_object(value: object) -> dict[str, object]:
    """A JSON object (an answer, a fault's score) of an answer."""
    if not isinstance(value, dict):
        raise _unexpected("a JSON object", value)
    return value


def array(value: object) -> list[object]:
    """A JSON array (ids, faults) of an answer."""
    if not isinstance(value, list):
        raise _unexpected("a JSON array", value)
    return value


def objects(value: object) -> list[dict[str, object]]:
    """A list of JSON objects (the faults, the expectations) of an answer."""
    return [json_object(item) for item in array(value)]


def integer(value: object) -> int:
    """``int(value)`` of a number (an id, a count) of an answer."""
    if not isinstance(value, int | float | str):
        raise _unexpected("a number", value)
    return int(value)


def number(value: object) -> float:
    """``float(value)`` of a number (a score) of an answer."""
    if not isinstance(value, int | float | str):
        raise _unexpected("a number", value)
    return float(value)
