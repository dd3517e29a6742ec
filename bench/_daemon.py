"""Start a real chaosd daemon for a benchmark: port 0, its own data directory, output drained."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_daemon(tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """The process and its base URL, once it listens; ``env`` adds ``CHAOSD_…``/``OTEL_…`` settings."""
    full = {
        **os.environ,
        "CHAOSD_API__PORT": "0",
        "CHAOSD_STORAGE__PATH": str(tmp / "db"),
        "CHAOSD_DAEMON__REPORT": str(tmp / "report.json"),
        "PYTHONPATH": str(ROOT),
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaosd"], cwd=tmp, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    stdout = proc.stdout
    assert stdout is not None
    for line in stdout:
        if "listening on " in line:
            # Keep reading, or status lines fill the pipe and stall the daemon mid-benchmark.
            threading.Thread(target=lambda: [None for _ in stdout], daemon=True).start()
            return proc, line.split("listening on ")[1].split()[0]
    raise RuntimeError("daemon did not start")
