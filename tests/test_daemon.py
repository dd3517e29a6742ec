"""The daemon as users run it: a real subprocess on loopback, stopped by SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import Daemon, wait_for

from chaosd.config import load_settings
from chaosd.daemon import check_bind
from chaosd.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def test_daemon_runs_the_default_config_and_exits_0_on_sigterm_with_a_report(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, config=ROOT / "config" / "chaosd.toml")
    try:
        status_line = daemon.wait_line("state=")  # the periodic status line
        assert "λ=" in status_line and "Q=" in status_line
        code, status = daemon.get("/api/v1/status")
        assert code == 200 and status["detector"] == "healthy"
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
