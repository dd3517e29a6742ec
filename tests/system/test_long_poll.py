"""Waiting for an outcome without sleeping: ``?wait=`` answers at the fault's verdict, event-driven."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import TOKEN, Daemon, ready_daemon, wait_for


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from ready_daemon(tmp_path_factory.mktemp("long-poll"))


class _Verdicts(threading.Thread):
    """Reads the event stream and notes, on the test's clock, when each fault's verdict arrives."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[str, float]] = {}
        self._resp = urllib.request.urlopen(daemon.base + "/api/v1/events?types=fault", timeout=60)

    def run(self) -> None:
        try:
            for raw in self._resp:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    data = json.loads(line[5:])
                    if data.get("state") in ("recovered", "failed", "unmeasured"):
                        self.seen[data["id"]] = (data["state"], time.monotonic())
        except (OSError, ValueError, AttributeError):  # closed by the test
            return

    def close(self) -> None:
        self._resp.close()


def test_a_long_poll_answers_at_the_verdict_not_at_its_deadline(daemon: Daemon) -> None:
    _settled(daemon)
    stream = _Verdicts(daemon)
    stream.start()
    try:
        code, fault = daemon.request("POST", "/api/v1/faults", {"action": "kill_leader", "ttl": 3})
        assert code == 201 and fault["outcome"] == "active"
        asked = time.monotonic()
        code, answer = daemon.request("GET", f"/api/v1/faults/{fault['id']}?wait=60s", token=None, timeout=70)
        answered = time.monotonic()
        assert code == 200 and answer["outcome"] == "recovered" and answer["recovery_s"] > 0
        wait_for(lambda: fault["id"] in stream.seen, 5, "the verdict on the event stream")
        state, verdict_at = stream.seen[fault["id"]]
        assert state == "recovered"
        # Answered with the verdict (both are woken by the same event), long before the 60 s deadline.
        assert abs(answered - verdict_at) < 0.1
        assert answered - asked < 30
    finally:
        stream.close()


def test_a_long_poll_without_a_verdict_answers_at_its_deadline_with_the_state_now(daemon: Daemon) -> None:
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "target": "worker-1", "ttl": 60})
    assert code == 201
    try:
        asked = time.monotonic()
        code, answer = daemon.request("GET", f"/api/v1/faults/{fault['id']}?wait=1.5s", token=None)
        took = time.monotonic() - asked
        assert code == 200 and answer["outcome"] == "active"
        assert 1.5 <= took < 2.5
        # A fault that already has its verdict is answered at once, whatever the wait.
    finally:
        daemon.request("DELETE", f"/api/v1/faults/{fault['id']}")


@pytest.mark.parametrize("wait", ["121", "5m", "soon", "-1"])
def test_a_wait_beyond_the_maximum_or_not_a_duration_is_400(daemon: Daemon, wait: str) -> None:
    code, body = daemon.request("GET", f"/api/v1/faults/1?wait={wait}", token=None)
    assert code == 400 and body["error"]["field"] == "wait", body


def _settled(daemon: Daemon) -> None:
    """Every earlier fault has its verdict: the next one is an incident of its own."""
    wait_for(
        lambda: all(
            f["outcome"] in ("recovered", "failed", "unmeasured") for f in daemon.get("/api/v1/faults")[1]["faults"]
        ),
        60,
        "earlier faults' verdicts",
    )


def test_inject_wait_prints_the_recovery_and_exits_by_the_verdict(daemon: Daemon, tmp_path: Path) -> None:
    _settled(daemon)
    env = {k: v for k, v in daemon.env.items() if not k.startswith("CHAOSD_")}
    argv = [sys.executable, "-m", "chaosd", "inject", "kill_agent", "--target", "worker-2", "--ttl", "3s"]
    argv += ["--wait", "60s", "--addr", daemon.base, "--token", TOKEN]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("fault ") and " injected: kill_agent on worker-2" in lines[0]
    # A loaded host may add how long it stalled the daemon before the verdict.
    verdict = rf"fault {lines[0].split()[1]} recovered in [0-9.]+ m?s \(heal clock\)(; the host stalled the daemon .*)?"
    assert re.fullmatch(verdict, lines[1]), lines[1]
    # Still pending when the wait runs out: exit 3, saying so.
    argv = [sys.executable, "-m", "chaosd", "inject", "slow_agent", "--target", "worker-3", "--ttl", "60s"]
    argv += ["--wait", "1s", "--addr", daemon.base, "--token", TOKEN]
    pending = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)
    assert pending.returncode == 3
    assert pending.stderr.strip().endswith("still active after 1 s (--wait)")
    daemon.request("DELETE", "/api/v1/faults?action=slow_agent")
