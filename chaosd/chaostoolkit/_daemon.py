"""The daemon an activity talks to: address from the configuration, token from the secrets."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from chaosd.client import Client, ClientError, await_verdict, selector

__all__ = ["ActivityFailed", "Daemon", "daemon", "query"]

DEFAULT_ADDR = "http://127.0.0.1:8686"


class ActivityFailed(Exception):
    """Raised so Chaos Toolkit records the activity as failed, with the daemon's own message."""


def daemon(configuration: Mapping[str, Any] | None, secrets: Mapping[str, Any] | None) -> Daemon:
    addr = (configuration or {}).get("chaosd_addr") or DEFAULT_ADDR
    token = (secrets or {}).get("token")
    return Daemon(Client(str(addr), str(token) if token else None))


def query(labels: Mapping[str, str] | None = None, actions: list[str] | None = None) -> str:
    """The fault selector as a query string (see :func:`chaosd.client.selector`)."""
    return urllib.parse.urlencode(selector(labels or {}, actions or ()))


class Daemon:
    """chaosd's own client, its refusals turned into the failures Chaos Toolkit records."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return self.client.request(method, path, body)
        except ClientError as exc:
            raise ActivityFailed(f"chaosd: {exc.message}") from None

    def wait_for_verdict(self, fault_id: int, wait: float) -> dict[str, Any]:
        """The fault once it has its verdict, or as it is after ``wait`` seconds (the API's long poll)."""
        try:
            return await_verdict(self.client, self.request("GET", f"/api/v1/faults/{fault_id}"), wait)
        except ClientError as exc:
            raise ActivityFailed(f"chaosd: {exc.message}") from None
