"""The daemon's local worker and orchestrator processes: forked from one warm spawner, signalled, noticed dead.

A fresh ``chaosd worker`` spends about a second of CPU importing chaosd, pydantic, numpy and redis. The spawner
(``chaosd worker --spawner``) pays that once, when the daemon starts; every worker and replica, and every
restart after a kill, is a fork of it, serving within milliseconds, so a restart does not take a core away from
the processes that are recovering. Its children are not the daemon's: each is watched through a pidfd.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from chaosd.config.redact import redact_url
from chaosd.config.settings import Settings
from chaosd.core.clock import Clock

__all__ = ["LocalProcesses", "children_settings"]

_URL_VARIABLE = "CHAOSD_BACKEND__URL"  # how the local processes get a backend.url with a password
_DEPENDENCIES_VARIABLE = "CHAOSD_DEPENDENCIES"  # and the dependencies' upstreams (secrets: the file masks them)


@dataclass(slots=True)
class _Proc:
    role: str
    pid: int
    pidfd: int
    stopped: bool = False  # SIGSTOP sent and no SIGCONT since
    reported: bool = False  # its exit was handed to the runtime


def _child_env() -> dict[str, str]:
    """Our environment, with this very package first on the path: children run the daemon's code."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[3])  # the folder holding chaosd/
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def children_settings(settings: Settings, path: Path) -> Callable[[], None]:
    """Write the settings file the local processes read, without the Redis password: a URL with credentials is
    written redacted, and the real one reaches the processes only as their environment variable
    CHAOSD_BACKEND__URL (which beats a file, as for every process), set here in the daemon's environment
    until the run ends (call what this returns) so that every spawner started meanwhile inherits it. The
    dependencies' upstreams likewise: redacted in the file, whole in CHAOSD_DEPENDENCIES (JSON) when one holds
    credentials. The file stays in the run's private directory either way (mode 0700, removed at the end)."""
    data = settings.model_dump(mode="json", exclude={"api", "daemon", "storage"}, by_alias=True)
    url = settings.backend.url
    data["backend"]["url"] = redact_url(url)
    variables: dict[str, str] = {}
    if data["backend"]["url"] != url:
        variables[_URL_VARIABLE] = url
    upstreams = {name: dep.upstream.get_secret_value() for name, dep in settings.dependencies.items()}
    data["dependencies"] = {name: {"upstream": redact_url(upstream)} for name, upstream in upstreams.items()}
    if any(redact_url(upstream) != upstream for upstream in upstreams.values()):
        variables[_DEPENDENCIES_VARIABLE] = json.dumps({name: {"upstream": u} for name, u in upstreams.items()})
    path.write_text(json.dumps(data))
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)

    def restore() -> None:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    return restore


def _gone(pidfd: int, timeout: float = 0.0) -> bool:
    """Whether the process behind ``pidfd`` has exited (waiting up to ``timeout`` seconds for it)."""
    readable, _, _ = select.select([pidfd], [], [], timeout)
    return bool(readable)


class LocalProcesses:
    """One OS process per agent id; ``exited()`` names those that died since the last call."""

    def __init__(self, settings_json: Path, log_dir: Path, clock: Clock) -> None:
        self._settings = settings_json
        self._logs = log_dir
        self._clock = clock
        self.procs: dict[str, _Proc] = {}
        self.started = 0
        self._spawner = self._start_spawner()

    def _start_spawner(self) -> subprocess.Popen[bytes]:
        with (self._logs / "spawner.log").open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "chaosd", "worker", "--settings-json", str(self._settings), "--spawner"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=_child_env(),
                start_new_session=True,  # a Ctrl-C at the terminal is the daemon's to handle, not theirs
            )

    def _fork(self, agent_id: str, role: str) -> int:
        """One line to the spawner, one pid back (the first call waits for the spawner's imports)."""
        spawner = self._spawner
        stdin: IO[bytes] | None = spawner.stdin
        stdout: IO[bytes] | None = spawner.stdout
        assert stdin is not None and stdout is not None
        log = self._logs / f"{agent_id}.log"
        try:
            stdin.write(f"{role} {agent_id} {log}\n".encode())
            stdin.flush()
            reply = stdout.readline()
        except OSError:
            reply = b""
        if not reply.strip().isdigit():
            raise OSError(f"the worker spawner exited (status {spawner.poll()}); see {self._logs / 'spawner.log'}")
        return int(reply)

    def start(self, agent_id: str, role: str) -> int:
        try:
            pid = self._fork(agent_id, role)
        except OSError:
            self._spawner.kill()  # killed from outside, say: one new spawner, one more try
            self._spawner.wait(timeout=5)
            self._spawner = self._start_spawner()
            pid = self._fork(agent_id, role)
        old = self.procs.get(agent_id)
        if old is not None:
            os.close(old.pidfd)
        self.procs[agent_id] = _Proc(role, pid, os.pidfd_open(pid))
        self.started += 1
        return pid

    def pid(self, agent_id: str) -> int | None:
        proc = self.procs.get(agent_id)
        return proc.pid if proc is not None and not _gone(proc.pidfd) else None

    def signal(self, agent_id: str, sig: signal.Signals) -> bool:
        proc = self.procs.get(agent_id)
        if proc is None:
            return False
        try:
            signal.pidfd_send_signal(proc.pidfd, sig)  # the pidfd names this process, never a reused pid
        except ProcessLookupError:
            return False
        if sig == signal.SIGSTOP:
            proc.stopped = True
        elif sig == signal.SIGCONT:
            proc.stopped = False
        return True

    def kill(self, agent_id: str) -> bool:
        """SIGKILL, and the exit is ours: ``exited`` will not report it."""
        proc = self.procs.get(agent_id)
        killed = self.signal(agent_id, signal.SIGKILL)
        if proc is not None:
            proc.reported = True
            _gone(proc.pidfd, 5.0)
        return killed

    def stopped(self, agent_id: str) -> bool:
        proc = self.procs.get(agent_id)
        return proc is not None and proc.stopped

    def exited(self) -> list[str]:
        gone = []
        for agent_id, proc in self.procs.items():
            if not proc.reported and _gone(proc.pidfd):
                proc.reported = True
                gone.append(agent_id)
        return gone

    def close(self, grace: float) -> None:
        """SIGTERM everyone (after SIGCONT, so stopped ones can hear it), SIGKILL what is left after ``grace``;
        then the spawner, by closing its input."""
        for agent_id in self.procs:
            self.signal(agent_id, signal.SIGCONT)
            self.signal(agent_id, signal.SIGTERM)
        deadline = self._clock.now() + grace
        for agent_id, proc in self.procs.items():
            if not _gone(proc.pidfd, max(0.0, deadline - self._clock.now())):
                self.signal(agent_id, signal.SIGKILL)
                _gone(proc.pidfd, 5.0)
            os.close(proc.pidfd)
        self.procs.clear()
        spawner = self._spawner
        if spawner.stdin is not None:
            spawner.stdin.close()
        try:
            spawner.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            spawner.kill()
            spawner.wait(timeout=5)
        if spawner.stdout is not None:
            spawner.stdout.close()
