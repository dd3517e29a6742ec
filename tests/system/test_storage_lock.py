"""One daemon per storage path: a second daemon on the same history exits 2 naming the path and the first's PID,
and changes nothing (the first one's run is not marked aborted); once the first is gone, the path is free."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from daemon_harness import Daemon, wait_for


def _second(tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaosd"], check=False, capture_output=True, text=True, timeout=60, cwd=tmp, env=env
    )


def _statuses(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, status FROM runs").fetchall())


def test_a_second_daemon_on_the_same_history_exits_2_naming_the_first_and_changes_nothing(tmp_path: Path) -> None:
    first = Daemon(tmp_path)
    db = Path(first.env["CHAOSD_STORAGE__PATH"])
    try:
        wait_for(lambda: _statuses(db).get(first.run_id) == "running", 15, "the first run stored as running")
        second_dir = tmp_path / "second"
        second_dir.mkdir()
        env = {**first.env, "CHAOSD_DAEMON__REPORT": str(second_dir / "report.json")}
        done = _second(second_dir, env)
        assert done.returncode == 2, done.stdout + done.stderr
        said = done.stdout + done.stderr
        assert str(db) in said and f"PID {first.proc.pid}" in said and "storage.path" in said, said
        assert "Traceback" not in said
        assert _statuses(db) == {first.run_id: "running"}  # nothing aborted, nothing added
        assert first.get("/readyz")[0] == 200
        assert not (second_dir / "report.json").exists()
    finally:
        first.proc.terminate()
        first.proc.wait(timeout=60)
    assert _statuses(db)[first.run_id] == "finished"
    # The first is gone: the path is free, and a new daemon takes it.
    again = Daemon(tmp_path / "second", env={"CHAOSD_STORAGE__PATH": str(db)})
    try:
        assert again.get("/readyz")[0] == 200
        lock = db.with_name(db.name + ".lock")
        assert lock.read_text().strip() == str(again.proc.pid) and os.stat(lock).st_mode & 0o777 == 0o600
    finally:
        again.proc.terminate()
        again.proc.wait(timeout=60)
