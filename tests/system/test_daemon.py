"""The daemon as users run it: a real subprocess on loopback, stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import queue
import shlex
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from daemon_harness import TOKEN, Daemon, wait_for

from chaosd.cli.serve import check_bind
from chaosd.config.settings import load_settings
from chaosd.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_daemon_runs_the_default_config_and_exits_0_on_sigterm_with_a_report(tmp_path: Path) -> None:
    # The periodic status line every 0.2 s rather than the harness's 1 s: the first comes sooner.
    daemon = Daemon(tmp_path, env={"CHAOSD_DAEMON__STATUS_INTERVAL": "0.2"}, config=ROOT / "config" / "chaosd.toml")
    try:
        status_line = daemon.wait_line("state=")  # the periodic status line
        assert "λ=" in status_line and "Q=" in status_line
        code, status = daemon.get("/api/v1/status")
        # Healthy; or a stall, if a loaded host paused the new daemon for 50 ms or more: never an alarm.
        assert code == 200 and status["detector"] in ("healthy", "stall"), status["detector"]
        wait_for(
            lambda: (daemon.get("/api/v1/status")[1]["telemetry"] or {}).get("throughput", 0) > 0,
            10,
            "tasks to complete",
        )
        assert daemon.terminate() == 0
        assert any("report written" in s for s in daemon.seen), daemon.seen
    finally:
        daemon.kill()
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


class _DaemonWithFlags(Daemon):
    """The harness's daemon started with command-line flags (the harness passes only ``--config``)."""

    def __init__(self, tmp: Path, flags: list[str], env: dict[str, str | None]) -> None:
        self.tmp = tmp
        merged: dict[str, str | None] = {
            **os.environ,
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "CHAOSD_DAEMON__STATUS_INTERVAL": "1",
            "CHAOSD_DAEMON__REPORT": str(tmp / "daemon-report.json"),
            "CHAOSD_STORAGE__PATH": str(tmp / "data" / "chaosd.db"),
            **env,
        }
        self.env = {k: v for k, v in merged.items() if v is not None}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaosd", *flags],
            cwd=tmp,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        line = self.wait_line("listening on http://")
        self.base = line.split("listening on ")[1].split()[0]


def _answers(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.headers.get_content_type(), resp.read()


def _client(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaosd", *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_port_and_host_flags_beat_the_environment_and_the_banner_says_where_to_look(tmp_path: Path) -> None:
    with socket.socket() as busy:  # what the environment asks for is taken: only the flags can make it start
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        env: dict[str, str | None] = {
            "CHAOSD_API__HOST": "127.0.0.1",
            "CHAOSD_API__PORT": str(taken),
            "CHAOSD_API__TOKEN": TOKEN,
            "CHAOSD_URL": None,
            "CHAOSD_ADDR": None,
        }
        daemon = _DaemonWithFlags(
            tmp_path, ["--config", str(ROOT / "config" / "chaosd.toml"), "--port", "0", "--host", "127.0.0.1"], env
        )
        try:
            port = int(daemon.base.rsplit(":", 1)[1])
            assert daemon.base == f"http://127.0.0.1:{port}" and port not in (0, taken)
            banner = {
                line.split()[1]: line.split(None, 2)[2]
                for line in (daemon.wait_line(f"chaosd:   {k} ") for k in ("arena", "metrics", "openapi", "try"))
            }
            assert banner["arena"] == f"{daemon.base}/arena"
            wait_for(lambda: daemon.get("/readyz")[0] == 200, 15, "/readyz")
            code, kind, page = _answers(banner["arena"])
            assert (code, kind) == (200, "text/html") and b"<html" in page.lower()
            code, _, metrics = _answers(banner["metrics"])
            assert code == 200 and b"# TYPE" in metrics
            code, kind, doc = _answers(banner["openapi"])
            assert (code, kind) == (200, "application/json") and json.loads(doc)["openapi"].startswith("3.")
            # The command it suggests, as printed (the token from the environment, as the note says), works.
            command, note = banner["try"].split("  (", 1)
            assert command == f"chaosd inject kill_leader --addr {daemon.base}" and "CHAOSD_API__TOKEN" in note
            client_env = daemon.env  # CHAOSD_API__TOKEN: the client reads it as the daemon does
            injected = _client(client_env, *shlex.split(command)[1:])
            assert injected.returncode == 0, injected.stderr
            assert "injected: kill_leader" in injected.stdout
            # The client finds the daemon by --host/--port, and by CHAOSD_URL.
            listed = _client(client_env, "faults", "--host", "127.0.0.1", "--port", str(port))
            assert listed.returncode == 0 and "kill_leader" in listed.stdout, listed.stderr
            listed = _client({**client_env, "CHAOSD_URL": daemon.base}, "faults", "--json")
            assert listed.returncode == 0, listed.stderr
            assert [f["action"] for f in json.loads(listed.stdout)["faults"]] == ["kill_leader"]
            assert daemon.terminate() == 0
        finally:
            daemon.kill()


@pytest.mark.parametrize("port", ["http", "-1", "65536", ""])
def test_a_bad_port_flag_exits_2_naming_it(tmp_path: Path, daemon_env: dict[str, str], port: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "chaosd", "--port", port],
        cwd=tmp_path,
        env=daemon_env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert "--port" in proc.stderr and "not a port number" in proc.stderr, proc.stderr
    assert not (tmp_path / "daemon-report.json").exists()


def test_a_busy_port_flag_is_named_in_the_refusal(tmp_path: Path, daemon_env: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "chaosd", "--host", "127.0.0.1", "--port", str(taken)],
            cwd=tmp_path,
            env=daemon_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{taken} (--host, --port)" in proc.stdout, proc.stdout + proc.stderr
