"""chaosd imports and runs where selectors has no epoll (macOS, the BSDs, Windows): each run is made in a child
process whose ``selectors`` lost ``EpollSelector`` and whose default selector is poll() or select(), as there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaosd.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
# The platform without epoll, made before chaosd is imported; the stand-in default selector counts its polls, so the
# run shows it went through it.
_WITHOUT_EPOLL = """
import selectors, sys
kind = sys.argv[1]
del selectors.EpollSelector

class Default(getattr(selectors, kind)):
    polls = 0

    def select(self, timeout=None):
        type(self).polls += 1
        return super().select(timeout)

selectors.DefaultSelector = Default
from chaosd.core.clock import *  # every name the module exports exists here too
from chaosd.cli.main import main
code = main(sys.argv[2:])
print(f"polls: {Default.polls}", file=sys.stderr)
raise SystemExit(code)
"""
KINDS = ["PollSelector", "SelectSelector"]
VIRTUAL = ["run", "leader_assassination", "--duration", "30", "--warmup", "3", "--quiet"]


def _without_epoll(kind: str, args: list[str]) -> int:
    """Run ``chaosd ARGS`` where there is no epoll and ``kind`` is the default selector; how many polls it made."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EPOLL, kind, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    polls = re.search(r"^polls: (\d+)$", done.stderr, re.M)
    assert polls is not None, done.stderr[-3000:]
    return int(polls.group(1))


@pytest.fixture(scope="module")
def with_epoll(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The virtual run's report here, on the precise epoll selector."""
    report = tmp_path_factory.mktemp("epoll") / "report.json"
    assert main([*VIRTUAL, "--report", str(report)]) == 0
    return report.read_bytes()


@pytest.mark.cpu
@pytest.mark.parametrize("kind", KINDS)
def test_a_virtual_run_without_epoll_is_the_same_report_byte_for_byte(
    kind: str, with_epoll: bytes, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    polls = _without_epoll(kind, [*VIRTUAL, "--report", str(report)])
    assert polls > 0  # the virtual loop watched its outside I/O through the stand-in
    assert report.read_bytes() == with_epoll  # virtual time does not depend on the selector


@pytest.mark.parametrize("kind", KINDS)
def test_a_real_time_run_without_epoll_serves_the_load(kind: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    polls = _without_epoll(kind, ["run", "--realtime", "--duration", "1", "--quiet", "--report", str(report)])
    data = json.loads(report.read_text())
    tasks = data["tasks"]
    assert polls > 100  # every timer of the real-time loop waited in the stand-in selector
    assert data["interrupted"] is False and data["duration_s"] == pytest.approx(1.0, abs=0.1)
    assert tasks["offered"] > 100 and tasks["lost"] == 0 and tasks["failed"] == 0
    assert tasks["completed"] >= 0.9 * (tasks["accepted"] - tasks["in_flight"])
