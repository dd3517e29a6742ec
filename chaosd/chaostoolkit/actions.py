"""Chaos Toolkit actions: inject and revert faults (by label), the safety lever, scenarios, windows."""

from __future__ import annotations

import time

from chaosd.chaostoolkit._daemon import ActivityFailed, Configuration, Secrets, array, daemon, integer, objects, query

__all__ = [
    "close_window",
    "inject_fault",
    "open_window",
    "pull_lever",
    "release_lever",
    "revert_faults",
    "run_scenario",
]


def inject_fault(
    action: str,
    target: str | None = None,
    ttl: float | str | None = None,
    params: dict[str, float | str] | None = None,
    labels: dict[str, str] | None = None,
    configuration: Configuration | None = None,
    secrets: Secrets | None = None,
) -> dict[str, object]:
    """Inject one fault (label it to revert or find it later); returns the fault as the daemon answered."""
    body: dict[str, object] = {"action": action}
    if target is not None:
        body["target"] = target
    if ttl is not None:
        body["ttl"] = ttl
    if params:
        body["params"] = params
    if labels:
        body["labels"] = labels
    return daemon(configuration, secrets).answer("POST", "/api/v1/faults", body)


def revert_faults(
    labels: dict[str, str] | None = None,
    action: str | None = None,
    configuration: Configuration | None = None,
    secrets: Secrets | None = None,
) -> list[int]:
    """Revert exactly the active faults carrying ``labels`` (and of ``action``, if given): a rollback that
    leaves other experiments' faults alone. Returns the ids reverted."""
    if not labels and not action:
        raise ActivityFailed("revert_faults needs labels or an action; to revert everything, pull the lever")
    answer = daemon(configuration, secrets).answer(
        "DELETE", "/api/v1/faults?" + query(labels, [action] if action else None)
    )
    return [integer(i) for i in array(answer["reverted"])]


def pull_lever(
    reason: str = "chaos toolkit", configuration: Configuration | None = None, secrets: Secrets | None = None
) -> int:
    """The safety lever: revert every fault and refuse new ones until released. Returns how many were reverted."""
    answer = daemon(configuration, secrets).answer("POST", "/api/v1/lever", {"reason": reason})
    return integer(answer["reverted"])


def release_lever(configuration: Configuration | None = None, secrets: Secrets | None = None) -> None:
    """Let faults in again after the lever was pulled."""
    daemon(configuration, secrets).request("DELETE", "/api/v1/lever")


def run_scenario(
    name: str,
    speed: float = 1.0,
    wait: bool = True,
    configuration: Configuration | None = None,
    secrets: Secrets | None = None,
) -> dict[str, object]:
    """Run a shipped scenario (by name) on the daemon; with ``wait``, until it ends. Fails if it did not pass."""
    d = daemon(configuration, secrets)
    status = d.answer("POST", "/api/v1/scenarios/run", {"name": name, "speed": speed})
    while wait and status["state"] == "running":
        status = d.answer("GET", "/api/v1/scenarios/current")
        if status["state"] == "running":
            time.sleep(0.5)  # the scenario's status has no long poll; twice a second is plenty
    if wait and status.get("passed") is False:
        failed = [e for e in objects(status.get("expectations", [])) if not e.get("passed")]
        raise ActivityFailed(f"scenario {name} did not pass: {failed}")
    return status


def open_window(
    name: str | None = None, configuration: Configuration | None = None, secrets: Secrets | None = None
) -> dict[str, object]:
    """Open a measurement window: what happens from now on is scored on its own."""
    return daemon(configuration, secrets).answer("POST", "/api/v1/windows", {"name": name} if name else {})


def close_window(
    window_id: int, configuration: Configuration | None = None, secrets: Secrets | None = None
) -> dict[str, object]:
    """Close a window; returns its final report (tasks, score, faults, incidents, diagnostics)."""
    return daemon(configuration, secrets).answer("DELETE", f"/api/v1/windows/{int(window_id)}")
