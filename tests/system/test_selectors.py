"""Scripts own their faults: labels on injection, selectors to list and revert exactly their own."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import TOKEN, Daemon

TTL = 120  # longer than the test: only a revert ends these faults


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = Daemon(tmp_path_factory.mktemp("selectors"))
    yield d
    d.kill()


def _tenant(daemon: Daemon, name: str, workers: tuple[str, str], seen: dict[str, Any]) -> None:
    """A script: inject two faults under its label, list its own, revert its own."""
    ids = []
    for action, target in (("slow_agent", workers[0]), ("pause_agent", workers[1])):
        code, fault = daemon.request(
            "POST", "/api/v1/faults", {"action": action, "target": target, "ttl": TTL, "labels": {"tenant": name}}
        )
        assert code == 201, fault
        ids.append(fault["id"])
    seen[f"{name}-injected"] = ids
    code, mine = daemon.request("GET", f"/api/v1/faults?label=tenant={name}&active=true", token=None)
    seen[f"{name}-listed"] = [f["id"] for f in mine["faults"]]
    seen[f"{name}-barrier"].wait(10)  # both tenants' faults are in before either reverts
    code, reverted = daemon.request("DELETE", f"/api/v1/faults?label=tenant={name}")
    assert code == 200, reverted
    seen[f"{name}-reverted"] = reverted["reverted"]


def test_two_tenants_at_once_each_revert_exactly_their_own_faults(daemon: Daemon) -> None:
    barrier = threading.Barrier(2)
    seen: dict[str, Any] = {"a-barrier": barrier, "b-barrier": barrier}
    tenants = [
        threading.Thread(target=_tenant, args=(daemon, "a", ("worker-0", "worker-1"), seen)),
        threading.Thread(target=_tenant, args=(daemon, "b", ("worker-2", "worker-3"), seen)),
    ]
    for t in tenants:
        t.start()
    for t in tenants:
        t.join(30)
    for name in ("a", "b"):
        assert sorted(seen[f"{name}-listed"]) == sorted(seen[f"{name}-injected"])
        assert sorted(seen[f"{name}-reverted"]) == sorted(seen[f"{name}-injected"])
    assert not set(seen["a-injected"]) & set(seen["b-injected"])
    for fault_id in seen["a-injected"] + seen["b-injected"]:
        code, fault = daemon.get(f"/api/v1/faults/{fault_id}")
        assert (
            code == 200
            and fault["reverted_by"] == "revert"
            and fault["labels"] == {"tenant": "a" if fault_id in seen["a-injected"] else "b"}
        )
    # The lever was never needed: new faults are still accepted.
    assert daemon.get("/api/v1/faults")[1]["lever"] is None


def test_a_revert_by_selector_leaves_everything_else_alone(daemon: Daemon) -> None:
    code, mine = daemon.request(
        "POST",
        "/api/v1/faults",
        {"action": "slow_agent", "target": "worker-0", "ttl": TTL, "labels": {"exp": "x", "run": "1"}},
    )
    code, other = daemon.request(
        "POST",
        "/api/v1/faults",
        {"action": "slow_agent", "target": "worker-1", "ttl": TTL, "labels": {"exp": "x", "run": "2"}},
    )
    code, bare = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "target": "worker-2", "ttl": TTL})
    # Every label must hold: run=1 picks one of the two experiment faults.
    code, answer = daemon.request("DELETE", "/api/v1/faults?label=exp=x&label=run=1")
    assert code == 200 and answer["reverted"] == [mine["id"]]
    active = {f["id"] for f in daemon.get("/api/v1/faults?active=true")[1]["faults"]}
    assert {other["id"], bare["id"]} <= active and mine["id"] not in active
    # An action selector reverts every active fault of that action, labelled or not.
    code, answer = daemon.request("DELETE", "/api/v1/faults?action=slow_agent")
    assert code == 200 and sorted(answer["reverted"]) == sorted([other["id"], bare["id"]])
    # Nothing left to pick: an empty answer, not an error.
    code, answer = daemon.request("DELETE", "/api/v1/faults?label=exp=x")
    assert code == 200 and answer == {"reverted": [], "faults": []}


def test_the_201_answer_says_where_the_fault_lives(daemon: Daemon) -> None:
    req = urllib.request.Request(
        daemon.base + "/api/v1/faults",
        data=b'{"action": "slow_agent", "target": "worker-3", "ttl": 60, "labels": {"who": "location"}}',
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        location = resp.headers["Location"]
    code, fault = daemon.get(location)
    assert code == 200 and fault["labels"] == {"who": "location"}
    assert location == f"/api/v1/faults/{fault['id']}"
    daemon.request("DELETE", location)


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("GET", "/api/v1/faults?team=a", "query"),  # an unknown filter is an error, never ignored
        ("GET", "/api/v1/faults?state=sleeping", "state"),
        ("GET", "/api/v1/faults?action=kill_everything", "action"),
        ("GET", "/api/v1/faults?label=tenant", "label"),
        ("GET", "/api/v1/faults?label=9x=a", "label.9x"),
        ("DELETE", "/api/v1/faults", "label"),  # no selector: the lever is how to revert everything
        ("DELETE", "/api/v1/faults?active=true", "active"),
    ],
)
def test_bad_selectors_are_400_naming_the_field_and_change_nothing(
    daemon: Daemon, method: str, path: str, field: str
) -> None:
    def ended() -> list[tuple[int, Any]]:
        return [(f["id"], f["reverted_at"]) for f in daemon.get("/api/v1/faults")[1]["faults"]]

    before = ended()
    code, body = daemon.request(method, path)
    assert code == 400 and body["error"]["field"] == field, body
    assert ended() == before


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"": "x"}, "labels."),
        ({"team": ""}, "labels.team"),
        ({"team": "x" * 129}, "labels.team"),
        ({f"k{i}": "v" for i in range(17)}, "labels"),
    ],
)
def test_bad_labels_are_refused_naming_the_field(daemon: Daemon, labels: dict[str, str], field: str) -> None:
    before = len(daemon.get("/api/v1/faults")[1]["faults"])
    code, body = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 5, "labels": labels})
    assert code == 422 and body["error"]["field"] == field, body
    assert len(daemon.get("/api/v1/faults")[1]["faults"]) == before


def test_the_cli_labels_lists_and_reverts_by_selector(daemon: Daemon, tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in daemon.env.items() if not k.startswith("CHAOSD_")}
        argv = [sys.executable, "-m", "chaosd", *args, "--addr", daemon.base, "--token", TOKEN]
        return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)

    done = cli("inject", "slow_agent", "--target", "worker-1", "--ttl", "60s", "--label", "tenant=cli")
    assert done.returncode == 0, done.stderr
    fault_id = int(done.stdout.split()[1])
    listed = cli("faults", "--label", "tenant=cli", "--state", "active")
    assert listed.returncode == 0 and f"\n{fault_id} " in "\n" + listed.stdout.split("\n", 1)[1]
    reverted = cli("revert", "--label", "tenant=cli")
    assert reverted.returncode == 0, reverted.stderr
    assert reverted.stdout.splitlines()[-1] == "1 fault(s) reverted"
    both = cli("revert", str(fault_id), "--label", "tenant=cli")
    assert both.returncode == 2 and "not both" in both.stderr
