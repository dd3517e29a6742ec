"""Storage you can trust, on a real daemon and real filesystems: a full disk, a read-only file, a deleted one.

A change is answered 2xx only once it is committed; otherwise 503 with the reason, and the state is as before.
Readiness is the storage's health now, and comes back once the disk has room. The tmpfs mounts need root
(CI runs as root); made read-only with ``chattr +i`` (``mount -o remount,ro`` is refused while the daemon
holds the file open for writing, and root ignores a chmod).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from daemon_harness import Daemon, wait_for
from mounts import ROOT_ONLY, fill, tmpfs


def storage_problems(daemon: Daemon) -> list[str]:
    code, body = daemon.get("/readyz")
    return [p for p in body["problems"] if p.startswith("storage:")] if code == 503 else []


def storage_metrics(daemon: Daemon) -> tuple[float, float]:
    """(chaosd_storage_up, the sum of chaosd_storage_errors_total over its ops)."""
    m = daemon.scrape()
    return m["chaosd_storage_up"], sum(v for k, v in m.items() if k.startswith("chaosd_storage_errors_total{"))


def state(daemon: Daemon) -> dict[str, Any]:
    """What a refused change must leave as it was: the active faults, the lever, the plans."""
    faults = daemon.get("/api/v1/faults")[1]
    status = daemon.get("/api/v1/status")[1]
    active = sorted(f["id"] for f in faults["faults"] if f["reverted_at"] is None)
    return {"active": active, "lever": faults["lever"], "survival": status["survival"], "windows": windows(daemon)}


def windows(daemon: Daemon) -> list[tuple[int, str]]:
    return [(w["id"], w["state"]) for w in daemon.get("/api/v1/windows")[1]["windows"]]


def inject(daemon: Daemon, ttl: float = 30.0) -> tuple[int, Any]:
    return daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": ttl})


@ROOT_ONLY
def test_a_full_disk_refuses_changes_and_readiness_comes_back_once_it_has_room(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "store", "4m") as store:
        daemon = Daemon(tmp_path, env={"CHAOSD_STORAGE__PATH": str(store / "chaosd.db")})
        try:
            assert storage_metrics(daemon) == (1.0, 0.0)  # the negative control: healthy, no errors
            assert daemon.get("/healthz")[1]["status"] == "ok"
            code, active = daemon.request("POST", "/api/v1/faults", {"action": "llm_failure", "ttl": 120})
            assert code == 201, active  # the negative control: acknowledged while the disk has room
            before = state(daemon)
            assert before["active"] == [active["id"]]
            filler = fill(store)
            # At once, before anything noticed: the change is refused or undone, never acknowledged.
            code, body = inject(daemon)
            assert code == 503, body
            message = body["error"]["message"]
            assert body["error"]["field"] == "storage"
            assert "nothing was changed" in message or "so undone" in message, message
            assert state(daemon) == before
            if "so undone" in message:  # injected, then its writes failed: reverted at once, and it says why
                assert daemon.get("/api/v1/faults")[1]["faults"][-1]["reverted_by"] == "unstored"
            wait_for(lambda: bool(storage_problems(daemon)), 10, "/readyz to report the full disk")
            injected = daemon.get("/api/v1/faults")[1]["injected"]
            for method, path, payload in (
                ("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 30}),
                ("POST", "/api/v1/windows", {"name": "w"}),
                ("POST", "/api/v1/survival", {"interval": "10s", "duration": "1m"}),
            ):
                code, body = daemon.request(method, path, payload)
                assert code == 503, (path, body)
                assert "nothing was changed" in body["error"]["message"], body
            assert state(daemon) == before
            assert daemon.get("/api/v1/faults")[1]["injected"] == injected  # not even an id was used
            code, health = daemon.get("/healthz")
            assert (code, health["status"]) == (200, "degraded"), health
            up, errors = storage_metrics(daemon)
            assert up == 0.0 and errors > 0
            assert daemon.get("/api/v1/status")[0] == 200  # reads go on
            # A safety action is carried out all the same, and says it could not be recorded.
            code, body = daemon.request("DELETE", f"/api/v1/faults/{active['id']}")
            assert code == 503 and body["error"]["message"].startswith("done (a safety action"), body
            assert daemon.get(f"/api/v1/faults/{active['id']}")[1]["reverted_by"] == "revert"
            assert state(daemon)["active"] == []

            filler.unlink()
            wait_for(lambda: daemon.get("/readyz")[0] == 200, 10, "/readyz once the disk has room")
            assert daemon.get("/healthz")[1]["status"] == "ok"
            assert storage_metrics(daemon)[0] == 1.0
            code, fault = inject(daemon, ttl=1.0)
            assert code == 201, fault
            stored = daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]
            assert fault["id"] in [f["id"] for f in stored["faults"]]

            # The disk fills just before each change: refused, or made and undone; either way 503, state as before.
            code, opened = daemon.request("POST", "/api/v1/windows", {"name": "kept"})
            assert code == 201
            assert daemon.request("POST", "/api/v1/lever", {"reason": "test"})[0] == 200
            for method, path, payload in (
                ("POST", "/api/v1/windows", {"name": "w2"}),
                ("DELETE", f"/api/v1/windows/{opened['id']}", None),
                ("DELETE", "/api/v1/lever", None),
            ):
                before = state(daemon)
                filler = fill(store)
                try:
                    code, body = daemon.request(method, path, payload)
                finally:
                    filler.unlink()
                assert code == 503, (path, body)
                assert state(daemon) == before, path
                wait_for(lambda: daemon.get("/readyz")[0] == 200, 10, "/readyz once the disk has room")
            assert daemon.request("DELETE", "/api/v1/lever")[0] == 200
            before = state(daemon)
            filler = fill(store)
            try:
                code, body = daemon.request("POST", "/api/v1/survival", {"interval": "10s", "duration": "1m"})
            finally:
                filler.unlink()
            assert code == 503, body
            assert state(daemon) == before
            assert daemon.terminate() == 0
            assert (tmp_path / "daemon-report.json").is_file()
        finally:
            daemon.kill()


@ROOT_ONLY
def test_storage_made_read_only_mid_run_is_reported_and_the_daemon_serves_on_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "store", "16m") as store:
        daemon = Daemon(tmp_path, env={"CHAOSD_STORAGE__PATH": str(store / "chaosd.db")})
        try:
            assert storage_problems(daemon) == []  # the negative control
            maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
            assert str(store) not in maps  # nothing of the storage is memory-mapped: no SIGBUS to have
            before = state(daemon)
            subprocess.run(["chattr", "-R", "+i", str(store)], check=True)
            wait_for(lambda: bool(storage_problems(daemon)), 10, "/readyz to report the read-only storage")
            assert "writes fail" in storage_problems(daemon)[0]
            code, body = inject(daemon)
            assert code == 503, body
            assert state(daemon) == before
            assert daemon.proc.poll() is None and daemon.get("/api/v1/status")[0] == 200
            # A read-only file can still be read: the history's reads go on, only changes are refused.
            assert daemon.get("/api/v1/runs")[0] == 200
            assert daemon.get(f"/api/v1/runs/{daemon.run_id}")[0] == 200
            assert daemon.get("/healthz")[1]["status"] == "degraded"
            assert storage_metrics(daemon)[0] == 0.0
            assert daemon.terminate() == 0  # not 135 (SIGBUS)
            assert (tmp_path / "daemon-report.json").is_file()
        finally:
            daemon.kill()


def reading_routes(daemon: Daemon, forgotten: int) -> list[str]:
    """Every route that reads the stored history: the runs, one run, and a fault older than those kept in memory."""
    return ["/api/v1/runs", f"/api/v1/runs/{daemon.run_id}", f"/api/v1/faults/{forgotten}"]


def forget_one_fault(daemon: Daemon) -> int:
    """Inject one more fault than memory keeps (history.faults = 10): the first is then read from storage."""
    ids = []
    for _ in range(11):
        code, fault = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 0.5})
        assert code == 201, fault
        ids.append(fault["id"])
        wait_for(lambda: daemon.get(f"/api/v1/faults/{ids[-1]}")[1]["reverted_at"] is not None, 10, "the fault's end")
    return ids[0]


def refused_reads(daemon: Daemon, routes: list[str]) -> dict[str, tuple[int, str]]:
    """Each route's status and its JSON error's field (or "" for a 2xx)."""
    answers = {}
    for route in routes:
        code, body = daemon.get(route)
        answers[route] = (code, body["error"]["field"] if code >= 400 else "")
    return answers


HISTORY_ENV = {"CHAOSD_HISTORY__FAULTS": "10"}


def test_a_database_deleted_mid_run_answers_reads_503_and_is_written_back_whole_at_the_next_check(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data" / "chaosd.db"
    daemon = Daemon(tmp_path, env=HISTORY_ENV)
    try:
        forgotten = forget_one_fault(daemon)
        routes = reading_routes(daemon, forgotten)
        assert refused_reads(daemon, routes) == dict.fromkeys(routes, (200, ""))  # the negative control
        stored = daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]
        path.unlink()
        assert storage_metrics(daemon)[0] == 0.0  # a scrape does not write it back: only a check that writes does
        assert refused_reads(daemon, routes) == dict.fromkeys(routes, (503, "storage"))
        code, body = daemon.get("/api/v1/runs")
        assert "was deleted" in body["error"]["message"], body
        # The next check writes the open history back at the path: nothing committed is lost, recording goes on.
        assert daemon.get("/readyz")[0] == 200
        assert path.is_file() and storage_metrics(daemon)[0] == 1.0
        assert refused_reads(daemon, routes) == dict.fromkeys(routes, (200, ""))
        assert daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]["faults"] == stored["faults"]
        code, fault = inject(daemon)
        assert code == 201, fault
        faults = daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]["faults"]
        assert fault["id"] in [f["id"] for f in faults]
        daemon.drain()
        assert not [line for line in daemon.seen if "Traceback" in line]
        assert len([line for line in daemon.seen if "written back from the open file; recording" in line]) == 1
        assert daemon.terminate() == 0
    finally:
        daemon.kill()


@ROOT_ONLY
def test_a_deleted_database_that_cannot_be_written_back_keeps_reads_and_changes_at_503_until_it_can(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "store", "16m") as store:
        path = store / "chaosd.db"
        daemon = Daemon(tmp_path, env={**HISTORY_ENV, "CHAOSD_STORAGE__PATH": str(path)})
        try:
            forgotten = forget_one_fault(daemon)
            routes = reading_routes(daemon, forgotten)
            stored = daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]
            path.unlink()
            subprocess.run(["chattr", "+i", str(store)], check=True)  # nothing can be linked into it now
            problems = storage_problems(daemon)
            assert problems and "cannot be written back: " in problems[0] and "is not writable" in problems[0], problems
            assert refused_reads(daemon, routes) == dict.fromkeys(routes, (503, "storage"))
            code, body = inject(daemon)
            assert code == 503 and "nothing was changed" in body["error"]["message"], body
            assert storage_metrics(daemon)[0] == 0.0
            assert not path.exists()
            subprocess.run(["chattr", "-i", str(store)], check=True)
            wait_for(lambda: daemon.get("/readyz")[0] == 200, 10, "/readyz once the history can be written back")
            assert refused_reads(daemon, routes) == dict.fromkeys(routes, (200, ""))
            assert daemon.get(f"/api/v1/runs/{daemon.run_id}")[1]["faults"] == stored["faults"]
            assert inject(daemon)[0] == 201
            daemon.drain()
            assert not [line for line in daemon.seen if "Traceback" in line]
            assert daemon.terminate() == 0
        finally:
            daemon.kill()


def test_a_database_replaced_mid_run_is_refused_until_the_replacement_goes(tmp_path: Path) -> None:
    path = tmp_path / "data" / "chaosd.db"
    daemon = Daemon(tmp_path, env=HISTORY_ENV)
    try:
        forgotten = forget_one_fault(daemon)
        routes = reading_routes(daemon, forgotten)
        assert storage_problems(daemon) == [] and storage_metrics(daemon)[0] == 1.0  # the negative control
        path.unlink()
        path.write_bytes(b"")  # not the history being recorded: never written over, never read as it
        wait_for(lambda: bool(storage_problems(daemon)), 5, "/readyz to report the replaced database")
        assert "was replaced" in storage_problems(daemon)[0]
        assert storage_metrics(daemon)[0] == 0.0
        code, body = inject(daemon)
        assert code == 503 and "nothing was changed" in body["error"]["message"], body
        assert refused_reads(daemon, routes) == dict.fromkeys(routes, (503, "storage"))
        assert path.read_bytes() == b""
        path.unlink()  # the replacement goes: the history is written back at the next check
        wait_for(lambda: daemon.get("/readyz")[0] == 200, 10, "/readyz once the replacement is gone")
        assert refused_reads(daemon, routes) == dict.fromkeys(routes, (200, ""))
        daemon.drain()
        assert len([line for line in daemon.seen if "was replaced" in line]) == 1  # logged once, not per check
        assert not [line for line in daemon.seen if "Traceback" in line]
    finally:
        daemon.kill()
