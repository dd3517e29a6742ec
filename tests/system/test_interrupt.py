"""Ctrl-C during ``chaosd run``: a real process, a real SIGINT → the partial report, one line on stderr, exit 130.

Each test waits for something the child shows (a survival line, the progress bar on a pseudo-terminal), never
for a fixed time. The progress bar appears only on a terminal and never with ``--quiet``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaosd.core import humanize

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 120.0  # seconds; generous, for a slow shared machine
CONTROL = re.compile(rb"\r|\x1b")  # what a progress bar writes; plain output has neither
INTERRUPTED = re.compile(
    r"chaosd: interrupted at t=\d+\.\d s \((simulated|real clock)\); partial report written to (?P<path>.+)"
)


class _Output:
    """Everything a child writes to one descriptor, read by a thread; waits for a needle with a deadline."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._data = b""
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:  # a pseudo-terminal whose child is gone reads as EIO, not EOF
                chunk = b""
            with self._changed:
                self._data += chunk
                self._changed.notify_all()
            if not chunk:
                os.close(self._fd)
                return

    def wait_for(self, needle: bytes) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: needle in self._data, timeout=DEADLINE)

    def finish(self) -> bytes:
        """All the output, once the child has closed its end."""
        self._thread.join(DEADLINE)
        assert not self._thread.is_alive(), "the child's output never ended"
        return self._data


class _Chaosd:
    """``python -m chaosd run …`` in ``cwd``; stdout on a pipe, or on a pseudo-terminal with ``tty``."""

    def __init__(self, args: list[str], cwd: Path, *, tty: bool) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
        env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", COLUMNS="100", LINES="40")
        if tty:
            parent, child = pty.openpty()
        else:
            parent, child = os.pipe()
        err_parent, err_child = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaosd", "run", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=child,
            stderr=err_child,
        )
        os.close(child)
        os.close(err_child)
        self.stdout = _Output(parent)
        self.stderr = _Output(err_parent)

    def wait_for(self, needle: bytes) -> None:
        if not self.stdout.wait_for(needle):
            self.proc.kill()
            pytest.fail(f"no {needle!r} on the child's output: {self.stdout.finish()[-2000:]!r}")

    def finish(self) -> tuple[int, bytes, bytes]:
        code = self.proc.wait(DEADLINE)
        return code, self.stdout.finish(), self.stderr.finish()


@pytest.fixture
def chaosd() -> Iterator[list[_Chaosd]]:
    """The children a test started; any still running when it ends are killed."""
    started: list[_Chaosd] = []
    yield started
    for child in started:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()


def _start(started: list[_Chaosd], args: list[str], cwd: Path, *, tty: bool = False) -> _Chaosd:
    child = _Chaosd(args, cwd, tty=tty)
    started.append(child)
    return child


def _assert_interrupted(code: int, out: bytes, err: bytes, report: Path, duration: float, clock: str) -> None:
    assert code == 130, (code, err)
    lines = err.decode().splitlines()
    assert len(lines) == 1, err
    match = INTERRUPTED.fullmatch(lines[0])
    assert match is not None and match.group(1) == clock, lines[0]
    assert Path(match.group("path")).resolve() == report.resolve()
    assert b"Traceback" not in out
    data = json.loads(report.read_text())
    assert data["interrupted"] is True
    assert 0 < data["duration_s"] < duration
    assert data["clock"] == ("virtual" if clock == "simulated" else "real")
    summary = out.decode()
    assert "chaosd run:" in summary and f"{humanize.seconds(data['duration_s'])} (warm-up" in summary


@pytest.mark.parametrize("signals", [1, 2], ids=["once", "twice-at-once"])
def test_ctrl_c_in_a_long_survival_run_writes_the_partial_report(
    tmp_path: Path, chaosd: list[_Chaosd], signals: int
) -> None:
    # Twice at once is what `timeout -s INT` sends (to the child, then to its group): still one interruption.
    report = tmp_path / "r.json"
    child = _start(chaosd, ["--survival", "--duration", "24h", "--report", str(report)], tmp_path)
    child.wait_for(b"  survival   t=")  # a simulated minute has run, with faults injected
    for _ in range(signals):
        child.proc.send_signal(signal.SIGINT)
    code, out, err = child.finish()
    _assert_interrupted(code, out, err, report, 86400, "simulated")
    assert not CONTROL.search(out) and not CONTROL.search(err)  # not a terminal: plain lines only
    assert json.loads(report.read_text())["faults_summary"]["injected"] > 0


@pytest.mark.parametrize(
    ("args", "duration", "clock"),
    [
        (["baseline", "--duration", "100000"], 100000, "simulated"),
        (["baseline", "--realtime", "--duration", "1h"], 3600, "real clock"),
    ],
)
def test_ctrl_c_on_a_terminal_stops_the_bar_and_writes_the_partial_report(
    tmp_path: Path, chaosd: list[_Chaosd], args: list[str], duration: float, clock: str
) -> None:
    report = tmp_path / "r.json"
    child = _start(chaosd, [*args, "--report", str(report)], tmp_path, tty=True)
    child.wait_for(f"s {clock} ·".encode())  # the progress bar is up, so the run is under way
    child.proc.send_signal(signal.SIGINT)
    code, out, err = child.finish()
    _assert_interrupted(code, out, err, report, duration, clock)
    assert b"\x1b[" in out  # the bar was drawn, then cleared for the summary


@pytest.mark.parametrize("args", [["--duration", "20s"], ["--realtime", "--duration", "2s"]])
def test_a_complete_run_is_not_interrupted_and_prints_no_bar_off_a_terminal(
    tmp_path: Path, chaosd: list[_Chaosd], args: list[str]
) -> None:
    # The real-time run lasts longer than the bar's delay: on a terminal it would show one.
    report = tmp_path / "r.json"
    code, out, err = _start(chaosd, ["baseline", *args, "--warmup", "1s", "--report", str(report)], tmp_path).finish()
    assert code == 0, err
    assert err == b""
    assert b"chaosd run: baseline" in out and not CONTROL.search(out)
    assert json.loads(report.read_text())["interrupted"] is False


def test_quiet_shows_no_bar_on_a_terminal(tmp_path: Path, chaosd: list[_Chaosd]) -> None:
    # Two seconds of real time: long enough for the bar (the test above shows it on a terminal) but for --quiet.
    report = tmp_path / "r.json"
    args = ["baseline", "--realtime", "--duration", "2s", "--warmup", "1s", "--quiet", "--report", str(report)]
    code, out, err = _start(chaosd, args, tmp_path, tty=True).finish()
    assert code == 0, err
    assert out == b"" and err == b""
    data = json.loads(report.read_text())
    assert data["interrupted"] is False and data["duration_s"] == pytest.approx(2, abs=0.1)


def test_the_bar_leaves_the_report_bytes_alone(tmp_path: Path, chaosd: list[_Chaosd]) -> None:
    reports = [tmp_path / "tty.json", tmp_path / "pipe.json"]
    outs = []
    for report, tty in zip(reports, (True, False), strict=True):
        # 600 simulated seconds take about 2 wall seconds here, four times the bar's delay, so the bar is drawn.
        args = ["baseline", "--seed", "5", "--duration", "600s", "--warmup", "10s", "--report", str(report)]
        code, out, err = _start(chaosd, args, tmp_path, tty=tty).finish()
        assert code == 0, err
        outs.append(out)
    assert b"\x1b[" in outs[0], "the run ended before its bar was due: nothing to compare"
    assert reports[0].read_bytes() == reports[1].read_bytes()
