"""Idle connections a real daemon holds while it still answers: opens them in steps, on loopback.

After each step a normal request must be answered; prints the connections held, that request's
latency, the daemon's RSS and open descriptors, and the RSS cost per idle connection. The run stops
at --max, at the first step the daemon fails (it died, or refused), or at the client's own fd limit.
``--root`` points at another chaosd checkout to measure it the same way (e.g. the previous release).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _start(root: Path, tmp: Path, max_connections: int) -> tuple[subprocess.Popen[str], str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "CHAOSD_API__PORT": "0",
        "CHAOSD_STORAGE__PATH": str(tmp / "db"),
        "CHAOSD_DAEMON__REPORT": str(tmp / "report.json"),
        "CHAOSD_LOAD__RATE": "100",
    }
    # Older releases have no such setting (their settings lived in chaosd/config.py).
    sources = [root / "chaosd" / "config" / "settings.py", root / "chaosd" / "config.py"]
    if any(path.is_file() and "max_connections" in path.read_text() for path in sources):
        env["CHAOSD_API__MAX_CONNECTIONS"] = str(max_connections)
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaosd"], cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    for line in stdout:
        if "listening on " in line:
            threading.Thread(target=lambda: [None for _ in stdout], daemon=True).start()
            return proc, line.split("listening on ")[1].split()[0]
    raise RuntimeError("daemon did not start")


def _metric(base: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max", type=int, default=10_000, help="stop after this many idle connections")
    parser.add_argument("--step", type=int, default=1000)
    parser.add_argument("--root", type=Path, default=ROOT, help="the chaosd checkout to run")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.max + 512), hard))
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = _start(args.root, Path(tmp), args.max + 100)
        host, port = base.removeprefix("http://").split(":")
        held: list[socket.socket] = []
        rss0 = _rss_mb(proc.pid)
        print(f"{'idle':>7} {'request ms':>10} {'RSS MB':>7} {'open fds':>8}  ({args.root.name or args.root})")
        try:
            while len(held) < args.max:
                try:
                    for _ in range(args.step):
                        held.append(socket.create_connection((host, int(port)), timeout=10))
                except OSError as exc:
                    code = proc.poll()
                    print(f"{len(held):7d}  FAILED: daemon exited {code}" if code is not None else f"client: {exc}")
                    break
                # Time the request once the daemon has accepted the step (where it counts its connections).
                deadline = time.perf_counter() + 30
                while time.perf_counter() < deadline and proc.poll() is None:
                    count = _metric(base, "chaosd_api_connections")
                    if count is None or count >= len(held):
                        break
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(base + "/api/v1/status", timeout=10) as resp:
                        ok = resp.status == 200
                except OSError as exc:
                    ok, why = False, exc
                ms = (time.perf_counter() - t0) * 1e3
                if not ok or proc.poll() is not None:
                    code = proc.poll()
                    print(f"{len(held):7d}  FAILED: {'daemon exited ' + str(code) if code is not None else why}")
                    break
                fds = _metric(base, "process_open_fds")
                shown = f"{fds:8.0f}" if fds is not None else "       -"
                print(f"{len(held):7d} {ms:10.1f} {_rss_mb(proc.pid):7.1f} {shown}")
            else:
                per = (_rss_mb(proc.pid) - rss0) * 1024 / max(1, len(held))
                print(f"held {len(held)} idle connections; RSS {per:.1f} KiB per connection")
        finally:
            for s in held:
                s.close()
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
