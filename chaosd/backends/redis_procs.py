"""The daemon's local worker and orchestrator processes: start, signal, notice deaths, stop them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalProcesses"]


@dataclass(slots=True)
class _Proc:
    role: str
    popen: subprocess.Popen[bytes]
    stopped: bool = False  # SIGSTOP sent and no SIGCONT since
    reported: bool = False  # its exit was handed to the runtime


def _child_env() -> dict[str, str]:
    """Our environment, with this very package first on the path: children run the daemon's code."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class LocalProcesses:
    """One OS process per agent id; ``exited()`` names those that died since the last call."""

    def __init__(self, settings_json: Path, log_dir: Path) -> None:
        self._settings = settings_json
        self._logs = log_dir
        self.procs: dict[str, _Proc] = {}
        self.started = 0

    def start(self, agent_id: str, role: str) -> int:
        log = (self._logs / f"{agent_id}.log").open("ab")
        try:
            popen = subprocess.Popen(
                [
                    sys.executable, "-m", "chaosd", "worker", "--settings-json", str(self._settings),
                    "--id", agent_id, "--role", role, "--parent", str(os.getpid()),
                ],
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                stdout=log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C at the terminal is the daemon's to handle, not theirs
            )  # fmt: skip
        finally:
            log.close()
        self.procs[agent_id] = _Proc(role, popen)
        self.started += 1
        return popen.pid

    def pid(self, agent_id: str) -> int | None:
        proc = self.procs.get(agent_id)
        return proc.popen.pid if proc is not None and proc.popen.poll() is None else None

    def signal(self, agent_id: str, sig: signal.Signals) -> bool:
        proc = self.procs.get(agent_id)
        if proc is None or proc.popen.poll() is not None:
            return False
        try:
            os.kill(proc.popen.pid, sig)
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
            proc.popen.wait(timeout=5)
        return killed

    def stopped(self, agent_id: str) -> bool:
        proc = self.procs.get(agent_id)
        return proc is not None and proc.stopped

    def exited(self) -> list[str]:
        gone = []
        for agent_id, proc in self.procs.items():
            if not proc.reported and proc.popen.poll() is not None:
                proc.reported = True
                gone.append(agent_id)
        return gone

    def close(self, grace: float) -> None:
        """SIGTERM everyone (after SIGCONT, so stopped ones can hear it), then SIGKILL what is left."""
        for agent_id, proc in self.procs.items():
            if proc.popen.poll() is None:
                self.signal(agent_id, signal.SIGCONT)
                self.signal(agent_id, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=5)
