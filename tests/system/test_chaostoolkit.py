"""The Chaos Toolkit extension, run by the real `chaos` CLI (chaostoolkit from PyPI) against a real daemon."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, TOKEN, Daemon, free_port, ready_daemon

import chaosd
from chaosd.chaostoolkit import actions, probes
from chaosd.chaostoolkit._daemon import ActivityFailed
from chaosd.chaostoolkit._daemon import daemon as daemon_for

EXAMPLE = ROOT / "examples" / "chaostoolkit" / "kill-the-leader.json"
LABEL = "label=experiment=ctk-kill-the-leader"


# One daemon at a time (two cores): each test that needs one starts its own.
@pytest.fixture
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from ready_daemon(tmp_path_factory.mktemp("ctk"))


@pytest.fixture
def tokenless_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from ready_daemon(tmp_path_factory.mktemp("ctk-open"), env={"CHAOSD_API__TOKEN": None})


def _chaos_run(daemon: Daemon, tmp: Path, name: str, token: str | None = TOKEN) -> dict[str, Any]:
    """``chaos run`` of the example, unchanged, with only CHAOSD_URL (and the token, if any) in the environment."""
    chaos = shutil.which("chaos")
    assert chaos is not None, "chaostoolkit is a test dependency"
    journal = tmp / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSD_")}
    env.update(CHAOSD_URL=daemon.base, PYTHONPATH=str(ROOT))
    if token is not None:
        env["CHAOSD_API__TOKEN"] = token
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
    # The token was needed: without it the daemon refuses a change, and the activity fails saying why.
    with pytest.raises(ActivityFailed, match=r"rejected \(401\)"):
        actions.pull_lever(configuration={"chaosd_addr": daemon.base})
    assert daemon.get("/api/v1/status")[1]["lever"] is None


@pytest.mark.slow  # tens of seconds of real time
def test_the_example_runs_unchanged_against_a_daemon_without_a_token(tokenless_daemon: Daemon, tmp_path: Path) -> None:
    assert any("no api.token" in line for line in tokenless_daemon.drain())  # the daemon really has none
    journal = _chaos_run(tokenless_daemon, tmp_path, "open", token=None)
    assert journal["status"] == "completed" and journal["deviated"] is False
    assert journal["steady_states"]["before"]["steady_state_met"] is True
    assert journal["steady_states"]["after"]["steady_state_met"] is True
    method = {r["activity"]["name"]: r for r in journal["run"]}
    assert method["kill-the-leader"]["output"]["action"] == "kill_leader"
    assert method["the-service-recovered"]["output"] == "recovered"
    assert [r["status"] for r in journal["rollbacks"]] == ["succeeded"]
    faults = tokenless_daemon.get(f"/api/v1/faults?{LABEL}")[1]["faults"]
    assert len(faults) == 1 and faults[0]["reverted_at"] is not None


@pytest.fixture
def _no_chaosd_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("CHAOSD_URL", "CHAOSD_ADDR", "CHAOSD_API__TOKEN", "CHAOSD_TOKEN", "CHAOSD_API__TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_with_no_token_anywhere_the_extension_sends_none(_no_chaosd_env: pytest.MonkeyPatch) -> None:
    for secrets in (None, {}, {"token": ""}):  # "" is what an empty secret resolves to
        client = daemon_for(None, secrets).client
        assert (client.base, client.token) == ("http://127.0.0.1:8686", None)


def test_the_address_and_token_come_from_configuration_and_secrets_else_the_environment(
    _no_chaosd_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = _no_chaosd_env
    env.setenv("CHAOSD_URL", "127.0.0.1:9001")
    env.setenv("CHAOSD_ADDR", "127.0.0.1:9002")  # the older name: CHAOSD_URL wins
    env.setenv("CHAOSD_API__TOKEN", "from-the-environment")
    client = daemon_for({}, None).client
    assert (client.base, client.token) == ("http://127.0.0.1:9001", "from-the-environment")
    client = daemon_for({"chaosd_addr": "http://127.0.0.1:9003"}, {"token": "from-the-secrets"}).client
    assert (client.base, client.token) == ("http://127.0.0.1:9003", "from-the-secrets")
    env.delenv("CHAOSD_API__TOKEN")
    (tmp_path / "token").write_text("from-a-file\n")
    env.setenv("CHAOSD_API__TOKEN_FILE", str(tmp_path / "token"))
    assert daemon_for({}, {}).client.token == "from-a-file"
    env.setenv("CHAOSD_API__TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ActivityFailed, match="CHAOSD_API__TOKEN_FILE: cannot read"):
        daemon_for({}, {})
    env.setenv("CHAOSD_URL", "ftp://127.0.0.1:1")
    with pytest.raises(ActivityFailed, match="CHAOSD_URL: not a daemon address"):
        daemon_for({}, {"token": "t"})


def test_an_unreachable_daemon_fails_the_activity_naming_the_address_and_how_to_set_another(
    _no_chaosd_env: pytest.MonkeyPatch,
) -> None:
    addr = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ActivityFailed) as failed:
        actions.release_lever(configuration={"chaosd_addr": addr})
    message = str(failed.value)
    assert f"cannot reach chaosd at {addr} (from configuration chaosd_addr): connection refused" in message
    assert "chaosd_addr or CHAOSD_URL" in message


def test_chaos_discover_lists_every_action_and_probe_with_its_arguments(tmp_path: Path) -> None:
    """``chaos discover chaosd`` imports the package the ``chaosd`` distribution provides and calls its ``discover``."""
    chaos = shutil.which("chaos")
    assert chaos is not None, "chaostoolkit is a test dependency"
    out = tmp_path / "discovery.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [
            *(chaos, "--no-version-check", "--log-file", str(tmp_path / "chaos.log"), "discover", "--no-install"),
            *("--no-system-info", "chaosd", "--discovery-path", str(out)),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    found = json.loads(out.read_text())
    assert found["extension"] == {"name": "chaosd", "version": chaosd.__version__} and found["target"] == "chaosd"
    listed = {(a["type"], a["mod"], a["name"]): a for a in found["activities"]}
    expected = [("action", actions, name) for name in actions.__all__] + [("probe", probes, n) for n in probes.__all__]
    assert set(listed) == {(kind, module.__name__, name) for kind, module, name in expected}
    for kind, module, name in expected:
        activity = listed[(kind, module.__name__, name)]
        parameters = inspect.signature(getattr(module, name)).parameters.values()
        assert [a["name"] for a in activity["arguments"]] == [p.name for p in parameters]
        defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
        assert {a["name"]: a["default"] for a in activity["arguments"] if "default" in a} == defaults
        assert activity["doc"]
    inject = listed[("action", "chaosd.chaostoolkit.actions", "inject_fault")]
    types = {a["name"]: a["type"] for a in inject["arguments"]}
    # Resolved annotations, not their text: what ``chaos init`` converts a typed-in value with.
    assert types["action"] == "string" and types["labels"] == "mapping" and types["configuration"] == "mapping"
    assert listed[("probe", "chaosd.chaostoolkit.probes", "leader_present")]["return_type"] == "boolean"


def test_import_chaosd_does_not_import_the_extension() -> None:
    code = "import sys, chaosd; print(sorted(m for m in sys.modules if m.startswith(('chaosd.', 'chaoslib'))))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    # Only the version it reports, from the one module every layer may read: no extension, no engine.
    assert done.stdout.strip() == "['chaosd.core', 'chaosd.core.version']" and callable(chaosd.discover)
