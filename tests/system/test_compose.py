"""docker-compose.yml as Compose reads it (Debian's docker-compose: there is no Docker engine here), and each
service's command, config and healthcheck run directly on loopback with the real programs (redis-server,
prometheus, prometheus-alertmanager, chaosd; Debian packages that `.ci/run` installs): the healthcheck fails before
its service is up and passes once it is. The Prometheus, Alertmanager, Grafana and Jaeger images run their checks
with busybox's wget; here GNU wget runs them, with the same options. Grafana and Jaeger have no Debian package:
their checks are read, not run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_harness import ROOT, Daemon, free_port, wait_for
from needs import program

PASSWORD = "GRAFANA_ADMIN_PASSWORD"


def _compose(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [program("docker-compose"), "-f", str(ROOT / "docker-compose.yml"), "config", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    token = tmp_path / "chaosd-token"
    token.write_text("t" * 32)
    keep = {k: v for k, v in os.environ.items() if k != PASSWORD}
    return keep | {"CHAOSD_TOKEN_FILE": str(token)} | extra


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The services as Compose resolves them (interpolated, normalized)."""
    done = _compose(_env(tmp_path_factory.mktemp("compose"), **{PASSWORD: "pw"}))
    assert done.returncode == 0, done.stderr
    return dict(yaml.safe_load(done.stdout)["services"])


def test_compose_refuses_to_start_grafana_without_an_admin_password(tmp_path: Path) -> None:
    assert _compose(_env(tmp_path, **{PASSWORD: "pw"}), "-q").returncode == 0
    for env in (_env(tmp_path), _env(tmp_path, **{PASSWORD: ""})):  # unset, and set but empty
        done = _compose(env, "-q")
        assert done.returncode != 0
        assert f"set {PASSWORD} to the password Grafana's admin gets" in done.stderr, done.stderr


def test_grafana_takes_that_password_and_lets_anonymous_visitors_only_view(services: dict[str, Any]) -> None:
    grafana = services["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == "pw"
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and grafana["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert grafana["GF_USERS_VIEWERS_CAN_EDIT"] == "false" and grafana["GF_USERS_ALLOW_SIGN_UP"] == "false"


def _unchecked(services: dict[str, Any]) -> list[str]:
    """Services without a healthcheck, and dependencies started before they are healthy."""
    found = [
        n for n, s in services.items() if not s.get("healthcheck", {}).get("test") or s["healthcheck"].get("disable")
    ]
    for name, service in services.items():
        depends = service.get("depends_on", {})
        found += [f"{name} → {d}" for d in depends if not isinstance(depends, dict)]  # a list: no condition
        if isinstance(depends, dict):
            found += [f"{name} → {d}" for d, c in depends.items() if c.get("condition") != "service_healthy"]
    return found


def test_every_service_has_a_healthcheck_and_starts_after_its_dependencies_are_healthy(
    services: dict[str, Any],
) -> None:
    assert set(services) == {"chaosd", "redis", "worker", "prometheus", "alertmanager", "grafana", "jaeger"}
    assert _unchecked(services) == []
    assert {d for s in services.values() for d in s.get("depends_on", {})} == set(services) - {"worker", "grafana"}
    # Control: the check finds a service left unchecked, and a dependency started merely before.
    broken = yaml.safe_load(yaml.safe_dump(services))
    del broken["grafana"]["healthcheck"]
    broken["prometheus"]["depends_on"]["chaosd"]["condition"] = "service_started"
    assert _unchecked(broken) == ["grafana", "prometheus → chaosd"]


def test_images_are_current_releases_pinned_to_an_exact_version(services: dict[str, Any]) -> None:
    images = {name: s["image"] for name, s in services.items() if s["image"] != "chaosd:local"}
    exact = re.compile(r"^[\w./-]+:v?\d+\.\d+\.\d+$")
    assert [image for image in images.values() if not exact.match(image)] == []
    majors = {name: image.split(":")[1].lstrip("v").split(".")[0] for name, image in images.items()}
    assert majors == {"redis": "8", "prometheus": "3", "alertmanager": "0", "grafana": "12", "jaeger": "2"}
    assert images["jaeger"].startswith("jaegertracing/jaeger:")  # Jaeger 2, not the all-in-one of Jaeger 1
    base = re.search(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert base is not None and re.fullmatch(r"python:3\.\d+\.\d+-slim", base[1]), base


# --- each service on loopback: its command and config, and its healthcheck before and after it is up ----------


def _check(service: dict[str, Any], replace: dict[str, str]) -> list[str]:
    """The service's healthcheck as an argv, with the container's addresses and paths replaced by this host's."""
    test = service["healthcheck"]["test"]
    argv = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else list(test[1:])
    for old, new in replace.items():
        argv = [arg.replace(old, new) for arg in argv]
    return argv


def _passes(argv: list[str], env: dict[str, str] | None = None) -> bool:
    done = subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False)
    return done.returncode == 0


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)


def _start(started: list[subprocess.Popen[bytes]], argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    started.append(proc)
    return proc


def _redis(started: list[subprocess.Popen[bytes]], services: dict[str, Any], tmp_path: Path) -> int:
    port = free_port()
    command = services["redis"]["command"]
    assert command[0] == "redis-server"
    argv = [program("redis-server"), *command[1:], "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    check = _check(services["redis"], {"redis-cli": f"{program('redis-cli')} -p {port}"})
    assert not _passes(check)  # control: nothing listens yet
    _start(started, argv)
    wait_for(lambda: _passes(check), 20, "redis's healthcheck passing")
    return port


def test_redis_with_its_command_and_healthcheck(
    started: list[subprocess.Popen[bytes]], services: dict[str, Any], tmp_path: Path
) -> None:
    _redis(started, services, tmp_path)
    assert (tmp_path / "appendonlydir").is_dir()  # the command's --appendonly yes took effect


def _prometheus_like(
    started: list[subprocess.Popen[bytes]], service: dict[str, Any], binary: str, paths: dict[str, Path], port: int
) -> None:
    """The service's command with its mounts replaced by this checkout's folders, listening on loopback."""
    argv = [binary]
    for arg in service["command"]:
        flag, _, value = arg.partition("=")
        argv.append(f"{flag}={paths[value]}" if value in paths else arg)
    argv.append(f"--web.listen-address=127.0.0.1:{port}")
    if "alertmanager" in binary:
        argv.append("--cluster.listen-address=")  # no gossip port: one instance
    inside = re.search(r"127\.0\.0\.1:(\d+)/", " ".join(service["healthcheck"]["test"]))
    assert inside is not None, service["healthcheck"]
    check = _check(service, {f":{inside[1]}/": f":{port}/"})
    assert not _passes(check)  # control: nothing listens yet
    _start(started, argv, cwd=paths["cwd"])
    wait_for(lambda: _passes(check), 30, f"{binary}'s healthcheck passing")


def test_prometheus_and_alertmanager_with_the_shipped_configs_and_their_healthchecks(
    started: list[subprocess.Popen[bytes]], services: dict[str, Any], tmp_path: Path
) -> None:
    prometheus = {
        "/etc/prometheus/prometheus.yml": ROOT / "config" / "prometheus" / "prometheus.yml",
        "/prometheus": tmp_path / "prometheus",
        "cwd": tmp_path,
    }
    alertmanager = {
        "/etc/alertmanager/alertmanager.yml": ROOT / "config" / "alertmanager" / "alertmanager.yml",
        "/alertmanager": tmp_path / "alertmanager",
        "cwd": tmp_path,
    }
    assert {v.partition("=")[2] for v in services["prometheus"]["command"]} >= set(prometheus) - {"cwd"}
    assert {v.partition("=")[2] for v in services["alertmanager"]["command"]} >= set(alertmanager) - {"cwd"}
    for mount in (*services["prometheus"]["volumes"], *services["alertmanager"]["volumes"]):
        source = mount["source"] if isinstance(mount, dict) else mount.split(":")[0]  # Compose v2, v1
        if source.startswith("/"):  # a bind mount, not a named volume
            assert Path(source).resolve().is_relative_to(ROOT / "config")  # the folders replaced above
    _prometheus_like(
        started, services["alertmanager"], program("prometheus-alertmanager", "alertmanager"), alertmanager, free_port()
    )
    _prometheus_like(started, services["prometheus"], program("prometheus"), prometheus, free_port())
    assert all(proc.poll() is None for proc in started)  # both still up, their configs accepted


def test_chaosd_healthcheck_against_a_real_daemon(services: dict[str, Any], tmp_path: Path) -> None:
    nowhere = _check(services["chaosd"], {":8686/": f":{free_port()}/"})
    assert not _passes(nowhere)  # control: nothing listens there
    daemon = Daemon(tmp_path)  # with a token, as in compose: /healthz needs none
    try:
        port = daemon.base.rsplit(":", 1)[1]
        assert _passes(_check(services["chaosd"], {":8686/": f":{port}/"}))
        # Prometheus 3 refuses a scrape whose Content-Type it cannot name (Prometheus 2 guessed the text format).
        with urllib.request.urlopen(f"{daemon.base}/metrics", timeout=10) as resp:
            media, _, params = resp.headers["Content-Type"].partition(";")
        assert media == "text/plain" and re.search(r"\bversion=(0\.0\.4|1\.0\.0)\b", params), params
    finally:
        daemon.kill()


def test_a_worker_is_healthy_while_it_beats_in_redis(
    started: list[subprocess.Popen[bytes]], services: dict[str, Any], tmp_path: Path
) -> None:
    port = _redis(started, services, tmp_path)
    worker = services["worker"]
    config = str(ROOT / "config" / "chaosd.toml")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **worker["environment"]}
    env["CHAOSD_BACKEND__URL"] = f"redis://127.0.0.1:{port}/0"
    command = worker["command"]
    assert command[:2] == ["chaosd", "worker"]
    check = [sys.executable if arg == "python" else arg for arg in _check(worker, {"/etc/chaosd/chaosd.toml": config})]
    assert not _passes(check, env)  # control: no worker yet
    argv = [sys.executable, "-m", "chaosd", *[config if a == "/etc/chaosd/chaosd.toml" else a for a in command[1:]]]
    proc = _start(started, argv, env=env, cwd=tmp_path)
    wait_for(lambda: _passes(check, env), 30, "the worker's healthcheck passing")
    proc.send_signal(signal.SIGKILL)  # a worker that dies without a word
    proc.wait(timeout=10)
    wait_for(lambda: not _passes(check, env), 10, "the dead worker's healthcheck failing")
