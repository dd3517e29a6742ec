"""The README's client commands, typed as written, against a real daemon with the default config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import ROOT, TOKEN, Daemon

from chaosd.client import EXIT_OK
from chaosd.config import load_settings
from chaosd.scenario import SHIPPED, load_scenario

README_LINE = "chaosd scenario run leader_assassination --speed 10"


def _client_env(daemon: Daemon) -> dict[str, str]:
    """The daemon's environment less every CHAOSD_ variable: the command gets only the options it is given."""
    return {k: v for k, v in daemon.env.items() if not k.startswith("CHAOSD_")}


@pytest.mark.slow  # tens of seconds of real time
def test_the_readme_scenario_run_passes_on_a_running_daemon(tmp_path: Path) -> None:
    assert README_LINE in (ROOT / "README.md").read_text()
    expect = load_scenario(SHIPPED / "leader_assassination.yaml").expect
    daemon = Daemon(tmp_path)
    try:
        daemon.wait_for_baseline()  # "once a daemon is running": it has a steady state to judge against
        argv = [*README_LINE.split()[1:], "--addr", daemon.base, "--token", TOKEN]
        done = subprocess.run(
            [sys.executable, "-m", "chaosd", *argv],
            check=False,
            cwd=tmp_path,
            env=_client_env(daemon),
            capture_output=True,
            text=True,
            timeout=120,
        )
        status = daemon.get("/api/v1/scenarios/current")[1]
        faults = [
            {k: f.get(k) for k in ("id", "action", "outcome", "recovery_s", "impact_s", "injected_at")}
            for f in daemon.get("/api/v1/faults")[1]["faults"]
        ]
    finally:
        daemon.kill()
    out = done.stdout.splitlines()
    verdicts = [line for line in out if line.startswith("  expect     ")]
    failed = {e["check"]: e["measured"] for e in status["expectations"] if not e["passed"]}
    checks = [e for e in status["log"] if e["action"] == "verify_leader"]
    kill = next(e for e in status["log"] if e["action"] == "kill_leader")
    assert done.returncode == EXIT_OK, (failed, status.get("score"), faults, done.stdout, done.stderr)
    assert done.stderr == ""
    assert out[0] == "scenario leader_assassination started (speed 10×)"
    assert len(verdicts) == len(expect) and all(line.startswith("  expect     pass: ") for line in verdicts), out
    assert re.fullmatch(r"scenario leader_assassination finished: passed · elapsed .*", out[-1]), out
    assert status["passed"] is True and failed == {}
    # At speed 10 the check comes 0.2 s after the kill, before the dead leader's lease has run out: it
    # waited for the standby, within the failover bound the runtime promises, and found it.
    cfg = load_settings(None).orchestrator
    assert checks and all(c["ok"] and c["leader"] is not None for c in checks)
    assert checks[0]["at"] - kill["at"] < cfg.lease_ttl  # the check came before any standby could take over …
    assert 0 < checks[0]["waited_s"] <= cfg.lease_ttl + cfg.renew_interval + 0.05  # … so it had to wait
