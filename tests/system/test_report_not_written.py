"""A report that cannot be written (a full disk) is kept elsewhere and named, leaves no temporary file behind, and
the command exits 8 with one line saying so: `chaosd run`, and the daemon at its shutdown (whose run stays in
its history as finished). The negative control: with room on the disk, the report is where it was asked."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from daemon_harness import Daemon
from mounts import ROOT_ONLY, fill, tmpfs

from chaosd.cli.exits import EXIT_REPORT_NOT_WRITTEN

pytestmark = ROOT_ONLY


def _fallback(pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"chaosd-report-{pid}.json"


def test_chaosd_run_keeps_a_report_it_cannot_write_and_exits_8(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1m") as disk:
        asked = disk / "out" / "report.json"
        argv = [sys.executable, "-m", "chaosd", "run", "baseline", "--duration", "3s", "--warmup", "1s", "--quiet"]
        argv += ["--report", str(asked)]
        roomy = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert roomy.returncode == 0 and json.loads(asked.read_text())["scenario"] == "baseline"  # the control
        asked.unlink()
        fill(disk)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        out, err = proc.communicate(timeout=120)
        kept = _fallback(proc.pid)
        try:
            assert proc.returncode == EXIT_REPORT_NOT_WRITTEN, err
            lines = [line for line in err.splitlines() if line.strip()]
            assert lines == [
                f"chaosd: report not written to {asked}: No space left on device; the report is kept in {kept} instead"
            ]
            assert "Traceback" not in out + err
            assert json.loads(kept.read_text())["scenario"] == "baseline"
            assert sorted(p.name for p in asked.parent.iterdir()) == []  # no report, no stray .tmp
        finally:
            kept.unlink(missing_ok=True)


def test_the_daemon_keeps_its_report_at_shutdown_on_a_full_disk_and_exits_8(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1m") as disk:
        asked = disk / "daemon-report.json"
        daemon = Daemon(tmp_path, env={"CHAOSD_DAEMON__REPORT": str(asked)})
        kept = _fallback(daemon.proc.pid)
        try:
            fill(disk)
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.proc.wait(timeout=60) == EXIT_REPORT_NOT_WRITTEN
            said = daemon.wait_line("report not written to")
            assert said == (
                f"chaosd: report not written to {asked}: No space left on device; the report is kept in {kept} "
                f"instead; the run's result is in the history ({daemon.env['CHAOSD_STORAGE__PATH']}, run "
                f"{daemon.run_id})"
            )
            assert json.loads(kept.read_text())["clock"] == "real"
            assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no report, no stray .tmp
            with sqlite3.connect(daemon.env["CHAOSD_STORAGE__PATH"]) as db:
                (status,) = db.execute("SELECT status FROM runs WHERE id = ?", (daemon.run_id,)).fetchone()
            assert status == "finished"
            assert not any("Traceback" in line for line in daemon.drain())
        finally:
            kept.unlink(missing_ok=True)
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                os.waitpid(daemon.proc.pid, 0)
