"""The daemon an activity talks to: address from the configuration, token from the secrets."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from chaosd.client import Client, ClientError
from chaosd.clock import wall_time

__all__ = ["ActivityFailed", "daemon", "selector"]

DEFAULT_ADDR = "http://127.0.0.1:8686"


class ActivityFailed(Exception):
    """Raised so Chaos Toolkit records the activity as failed, with the daemon's own message."""


def daemon(configuration: Mapping[str, Any] | None, secrets: Mapping[str, Any] | None, timeout: float = 10.0) -> Any:
    addr = (configuration or {}).get("chaosd_addr") or DEFAULT_ADDR
    token = (secrets or {}).get("token")
    return _Daemon(Client(str(addr), str(token) if token else None, timeout=timeout))


def selector(labels: Mapping[str, str] | None = None, actions: list[str] | None = None) -> str:
    pairs = [("label", f"{k}={v}") for k, v in (labels or {}).items()] + [("action", a) for a in actions or []]
    return urllib.parse.urlencode(pairs)


class _Daemon:
    def __init__(self, client: Client) -> None:
        self.client = client

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        saved = self.client.timeout
        if timeout is not None:
            self.client.timeout = timeout
        try:
            return self.client.request(method, path, body)
        except ClientError as exc:
            raise ActivityFailed(f"chaosd: {exc.message}") from None
        finally:
            self.client.timeout = saved

    def wait_for_verdict(self, fault_id: int, wait: float) -> dict[str, Any]:
        """Long-poll the fault until it has its verdict or ``wait`` seconds pass; the fault as it is then."""
        deadline = wall_time() + wait
        fault: dict[str, Any] = self.request("GET", f"/api/v1/faults/{fault_id}")
        while fault["outcome"] not in ("recovered", "failed", "unmeasured"):
            left = deadline - wall_time()
            if left <= 0:
                break
            poll = min(left, 120.0)
            fault = self.request("GET", f"/api/v1/faults/{fault_id}?wait={poll:.3f}", timeout=poll + 10)
        return fault
