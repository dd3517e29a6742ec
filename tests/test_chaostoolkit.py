"""The Chaos Toolkit extension, run by the real `chaos` CLI (chaostoolkit from PyPI) against a real daemon."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, TOKEN, Daemon, ready_daemon

from chaosd.chaostoolkit import discover

EXAMPLE = ROOT / "examples" / "chaostoolkit" / "kill-the-leader.json"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from ready_daemon(tmp_path_factory.mktemp("ctk"))


def _chaos_run(daemon: Daemon, tmp: Path, name: str) -> dict[str, Any]:
    chaos = shutil.which("chaos")
    assert chaos is not None, "chaostoolkit is a test dependency"
    journal = tmp / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSD_")}
    env.update(CHAOSD_ADDR=daemon.base, CHAOSD_API__TOKEN=TOKEN, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [
            *(chaos, "--no-version-check", "--log-file", str(tmp / f"{name}.log"), "run"),
            *("--journal-path", str(journal), "--rollback-strategy", "always", str(EXAMPLE)),
        ],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data: dict[str, Any] = json.loads(journal.read_text())
    return data


@pytest.mark.slow  # tens of seconds of real time
def test_the_example_experiment_runs_completed_and_rolls_back_only_its_own_faults(
    daemon: Daemon, tmp_path: Path
) -> None:
    # Another tenant's fault, active through both experiments: neither rollback may touch it.
    code, other = daemon.request(
        "POST",
        "/api/v1/faults",
        {
            "action": "slow_agent",
            "target": "producer-3",
            "params": {"factor": 1.2},
            "ttl": 170,
            "labels": {"tenant": "other"},
        },
    )
    assert code == 201
    first = _chaos_run(daemon, tmp_path, "first")
    assert first["status"] == "completed" and first["deviated"] is False
    assert first["steady_states"]["before"]["steady_state_met"] is True
    assert first["steady_states"]["after"]["steady_state_met"] is True
    method = {r["activity"]["name"]: r for r in first["run"]}
    killed = method["kill-the-leader"]["output"]
    assert killed["action"] == "kill_leader" and killed["labels"] == {"experiment": "ctk-kill-the-leader"}
    assert method["the-service-recovered"]["output"] == "recovered"
    # Availability was measured in windows of their own, and met the 99 % the hypothesis asks.
    probes = first["steady_states"]["before"]["probes"] + first["steady_states"]["after"]["probes"]
    assert all(p["tolerance_met"] for p in probes)
    # Right after it, on the same daemon: the first experiment's faults do not poison the second.
    second = _chaos_run(daemon, tmp_path, "second")
    assert second["status"] == "completed" and second["deviated"] is False
    assert second["steady_states"]["before"]["steady_state_met"] is True
    again = {r["activity"]["name"]: r for r in second["run"]}["kill-the-leader"]["output"]
    assert again["id"] != killed["id"]
    assert daemon.get(f"/api/v1/faults/{other['id']}")[1]["reverted_at"] is None
    daemon.request("DELETE", "/api/v1/faults?label=tenant=other")


def test_discovery_lists_every_action_and_probe() -> None:
    found = discover(discover_system=False)
    names = {(a["type"], a["name"]) for a in found["activities"]}
    assert {("action", n) for n in ("inject_fault", "revert_faults", "pull_lever", "release_lever")} <= names
    assert {("action", n) for n in ("run_scenario", "open_window", "close_window")} <= names
    probes = ("leader_present", "fault_outcome", "window_score", "window_grade", "availability_over", "collapse_state")
    assert {("probe", n) for n in probes} <= names
    inject = next(a for a in found["activities"] if a["name"] == "inject_fault")
    assert inject["mod"] == "chaosd.chaostoolkit.actions"
    assert {arg["name"] for arg in inject["arguments"]} >= {"action", "target", "ttl", "labels"}
