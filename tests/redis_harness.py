"""A real Debian ``redis-server`` on a free loopback port for the Redis backend's tests; stopped by its PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import wait_for
from needs import program

__all__ = ["RedisServer", "free_port", "redis_settings", "running_redis", "server", "shared_redis"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ping(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process; ``restart`` keeps its port and directory (and so its AOF, if any)."""

    def __init__(
        self, directory: Path, *, persistent: bool = False, host: str = "127.0.0.1", also_bind: str | None = None
    ) -> None:
        self.binary = program("redis-server")
        self.dir = directory
        self.host = host
        self.also_bind = also_bind  # a second address (a test's own veth link) the server listens on
        self.port = free_port()
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, *, persistent: bool | None = None) -> None:
        if persistent is not None:
            self.persistent = persistent
        binds = [self.host] if self.also_bind is None else [self.host, self.also_bind]
        if self.also_bind is not None:  # the test's own veth link, nothing beyond it: no password needed
            binds += ["--protected-mode", "no"]
        args = [self.binary, "--port", str(self.port), "--bind", *binds, "--save", "", "--dir", str(self.dir)]
        args += ["--daemonize", "no", "--logfile", str(self.dir / "redis.log")]
        if self.persistent:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        wait_for(lambda: _ping(self.host, self.port), 10.0, f"redis-server on port {self.port}")

    def kill(self) -> None:
        """SIGKILL by PID: no shutdown save, whatever is not on disk is gone."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self, *, persistent: bool | None = None) -> None:
        self.kill()
        self.start(persistent=persistent)

    def emptied(self) -> RedisServer:
        """FLUSHALL: the next test finds the server as a fresh one (the fencing counter starts again too)."""
        with socket.create_connection((self.host, self.port), timeout=5) as s:
            s.sendall(b"FLUSHALL\r\n")
            assert s.recv(16).startswith(b"+OK")
        return self


@contextmanager
def running_redis(directory: Path, *, persistent: bool = False) -> Iterator[RedisServer]:
    server = RedisServer(directory, persistent=persistent)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for a module whose tests never restart it (import with ``server``)."""
    with running_redis(tmp_path_factory.mktemp("redis")) as shared:
        yield shared


@pytest.fixture
def server(shared_redis: RedisServer) -> RedisServer:
    """The module's redis-server, emptied for this test."""
    return shared_redis.emptied()


def redis_settings(url: str, **sections: Any) -> dict[str, Any]:
    """A config overlay running the Redis backend against ``url``; ``sections`` merge over the defaults here."""
    base: dict[str, Any] = {
        "seed": 3,
        "backend": {"kind": "redis", "url": url, "poll": 0.05},
        "load": {"rate": 100.0, "producers": 2},
        "workers": {"count": 2},
        "orchestrator": {"replicas": 2, "lease_ttl": 0.5, "renew_interval": 0.1, "task_lease": 1.0},
        "supervisor": {"backoff": {"base": 0.2, "factor": 1.0, "max": 0.2}},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base
