"""A real network partition: a worker in its own network namespace, joined to Redis by a veth pair, loses the
link mid-task (``ip link set … down``). Its tasks come back through lease expiry and take effect once. Root only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_harness import RedisServer, redis_settings
from test_redis_backend import QUIET, experiment, pending_of, results_by_task, until

from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.config.settings import load_settings
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
NS = f"chaosd-t{os.getpid()}"
HOST_IF, NS_IF = f"vc{os.getpid()}a", f"vc{os.getpid()}b"
SUBNET = 10 + os.getpid() % 200  # 10.213.SUBNET.0/30
HOST_IP, NS_IP = f"10.213.{SUBNET}.1", f"10.213.{SUBNET}.2"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def namespace() -> Any:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("needs the ip command (iproute2)")
    try:
        ip("netns", "add", NS)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.decode().strip()}")
    try:
        ip("link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        ip("link", "set", NS_IF, "netns", NS)
        ip("addr", "add", f"{HOST_IP}/30", "dev", HOST_IF)
        ip("link", "set", HOST_IF, "up")
        ip("netns", "exec", NS, "ip", "addr", "add", f"{NS_IP}/30", "dev", NS_IF)
        ip("netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
        ip("netns", "exec", NS, "ip", "link", "set", "lo", "up")
        yield NS
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False, capture_output=True, timeout=10)
        # The host end goes with its peer in the namespace, usually; make sure.
        subprocess.run(["ip", "link", "del", HOST_IF], check=False, capture_output=True, timeout=10)


def test_a_cut_link_is_recovered_through_lease_expiry(tmp_path: Path, namespace: str) -> None:
    server = RedisServer(tmp_path, also_bind=HOST_IP)
    server.start()
    worker: subprocess.Popen[bytes] | None = None
    try:
        # One local worker in the daemon's namespace, one in the test's namespace reaching Redis over the veth.
        overlay = redis_settings(server.url, **{**QUIET, "workers": {"count": 1}})
        settings = load_settings(None, overlay)
        remote = dict(overlay, backend={**overlay["backend"], "url": f"redis://{HOST_IP}:{server.port}/0"})
        settings_json = tmp_path / "remote.json"
        settings_json.write_text(json.dumps(remote))
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        log = (tmp_path / "remote.log").open("wb")
        client = redis.Redis.from_url(server.url, decode_responses=True)
        seen: dict[str, Any] = {}

        async def plan(exp: Experiment) -> None:
            nonlocal worker
            p = exp.pipeline
            rt = p.host
            assert isinstance(rt, RedisRuntime)
            command = ["ip", "netns", "exec", NS, sys.executable, "-m", "chaosd", "worker"]
            command += ["--settings-json", str(settings_json), "--id", "worker-ns"]
            worker = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
            )
            await until(exp, lambda: bool(pending_of(client, "worker-ns")), 20, "the namespaced worker mid-task")
            expired = rt.lease.lease_expired
            ip("link", "set", HOST_IF, "down")  # the partition: no packet crosses until it is up again
            held = pending_of(client, "worker-ns")
            seen["held"] = [client.xrange("chaosd:tasks", e, e)[0][1]["i"] for e in held]
            try:
                await until(exp, lambda: rt.lease.lease_expired >= expired + len(held), 10, "the lease to expire")
                await until(
                    exp, lambda: all(t in results_by_task(client) for t in seen["held"]), 10, "the tasks redone"
                )
                seen["redone_by"] = {
                    fields["w"] for _, fields in client.xrange("chaosd:results") if fields["i"] in seen["held"]
                }
            finally:
                ip("link", "set", HOST_IF, "up")
            served = sum(1 for _, f in client.xrange("chaosd:results") if f["w"] == "worker-ns")
            await until(
                exp,
                lambda: sum(1 for _, f in client.xrange("chaosd:results") if f["w"] == "worker-ns") > served,
                20,
                "the namespaced worker back at work",
            )
            await rt.refresh()
            exp.stop.set()

        report, _ = experiment(settings, 80.0, 0.5, plan)
        assert seen["held"], "the namespaced worker held a task when the link went down"
        assert seen["redone_by"] == {"worker-0"}  # taken over on this side of the partition
        counts = results_by_task(client)
        assert all(counts[t] == 1 for t in seen["held"])
        assert max(counts.values()) == 1
        assert report["tasks"]["lost_all_cohorts"] == 0 and report["tasks"]["duplicated"] == 0
        client.close()
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)
        server.kill()
