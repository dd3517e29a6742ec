"""The daemon as users run it: a real subprocess on loopback, stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from chaosd.config import load_settings
from chaosd.daemon import check_bind
from chaosd.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _wait_for(predicate: Callable[[], bool], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)  # polling interval of a condition wait with a deadline, not a fixed sleep
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")


class Daemon:
    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaosd", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_line(self, needle: str, deadline_s: float = 20.0) -> str:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no line with {needle!r}; output so far: {self.seen}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def daemon_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["CHAOSD_API__PORT"] = "0"  # the daemon prints the port it got
    env["CHAOSD_DAEMON__STATUS_INTERVAL"] = "0.5"
    env["CHAOSD_DAEMON__REPORT"] = str(tmp_path / "daemon-report.json")
    return env


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_daemon_runs_the_default_config_and_exits_0_on_sigterm_with_a_report(
    tmp_path: Path, daemon_env: dict[str, str]
) -> None:
    daemon = Daemon(["--config", str(ROOT / "config" / "chaosd.toml")], tmp_path, daemon_env)
    try:
        line = daemon.wait_line("listening on http://127.0.0.1:")
        base = line.split("listening on ")[1].split()[0]
        _wait_for(lambda: _get(base + "/readyz")[0] == 200, 10, "/readyz to answer 200")
        status_line = daemon.wait_line("state=")  # the periodic status line
        assert "λ=" in status_line and "Q=" in status_line
        code, status = _get(base + "/api/v1/status")
        assert code == 200 and status["detector"] == "healthy"
        _wait_for(
            lambda: (_get(base + "/api/v1/status")[1]["telemetry"] or {}).get("throughput", 0) > 0,
            10,
            "tasks to complete",
        )
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=10) == 0
        while not daemon.lines.empty():
            daemon.seen.append(daemon.lines.get())
        assert any("report written" in s for s in daemon.seen), daemon.seen
    finally:
        daemon.stop()
    report = json.loads((tmp_path / "daemon-report.json").read_text())
    assert report["clock"] == "real"
    assert report["tasks"]["completed"] > 0
    assert report["tasks"]["lost"] == 0 and report["tasks"]["duplicated"] == 0
    t = report["tasks"]
    assert t["accepted"] == t["completed"] + t["failed"] + t["in_flight"] + t["lost"]


def test_daemon_refuses_bad_config_with_exit_2(tmp_path: Path, daemon_env: dict[str, str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[load]\nrate = -1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "chaosd", "--config", str(bad)],
        cwd=tmp_path,
        env=daemon_env,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "bad.toml" in proc.stderr and "load.rate" in proc.stderr
    assert not (tmp_path / "daemon-report.json").exists()


def test_prod_config_is_accepted_and_needs_a_token_to_bind_beyond_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CHAOSD_API__TOKEN", raising=False)
    settings = load_settings(ROOT / "config" / "prod.toml")
    assert settings.api.host == "0.0.0.0" and settings.throttle.enabled
    with pytest.raises(ConfigError) as exc:
        check_bind(settings)
    assert exc.value.problems[0][1] == "api.token"
    monkeypatch.setenv("CHAOSD_API__TOKEN", "a-long-enough-token")
    check_bind(load_settings(ROOT / "config" / "prod.toml"))  # accepted: nothing raised


def test_daemon_refuses_a_public_bind_without_token_with_exit_2(tmp_path: Path, daemon_env: dict[str, str]) -> None:
    env = {**daemon_env, "CHAOSD_API__HOST": "0.0.0.0"}
    env.pop("CHAOSD_API__TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "chaosd"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2 and "api.token" in proc.stderr
