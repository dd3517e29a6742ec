"""``--python-versions``: ``scripts/python_versions.py`` against the golden reports, run beside the suite at the lowest
CPU priority, its verdict part of the session's.

The suite leaves a core idle for much of its time (its real-time tests wait on daemons, Prometheus, Chromium and
Redis); the other Python versions' scenario runs take that idle time. At nice 19 the scheduler gives them the CPU
only when no test wants it, so they do not make the real-time tests late. The session waits for them at its end,
prints their output, and fails if a report differs or a run failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_RUN = pytest.StashKey[tuple[subprocess.Popen[bytes], Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--python-versions",
        action="store_true",
        help="meanwhile, at nice 19, compare every shipped scenario's report on the other Python versions with the "
        "golden reports (scripts/python_versions.py --against tests/golden/reports)",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("python_versions") or hasattr(config, "workerinput"):
        return  # not asked, or an xdist worker: the controller runs it once
    fd, name = tempfile.mkstemp(prefix="chaosd-versions-", suffix=".log")
    script = str(ROOT / "scripts" / "python_versions.py")
    command = ["nice", "-n", "19", sys.executable, script, "--against", "tests/golden/reports"]
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    config.stash[_RUN] = (proc, Path(name))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is None:
        return
    proc, log = run
    code = proc.wait()
    output = log.read_text(errors="replace")
    log.unlink()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("-", f"scripts/python_versions.py (exit {code})")
        reporter.write(output)
    if code != 0 and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
