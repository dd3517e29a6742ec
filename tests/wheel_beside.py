"""The compiled wheel ``tests/system/test_install.py`` installs, built beside the suite from its start, at nice 19.

Building it compiles the hot path for most of a minute of CPU; the suite leaves a core idle for much of its time (see
``versions_beside.py``), so a whole-suite run (``--python-versions``, as CI runs it) starts the build at the session's
start and the install test takes the wheel when it comes, rather than compiling on its own worker meanwhile. Run alone,
the install test builds the wheel itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from daemon_harness import wait_for

ROOT = Path(__file__).resolve().parent.parent
# What a source distribution of chaosd holds, as the Dockerfile copies it: nothing else is needed to build the wheel.
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "build_backend", "README.md", "LICENSE", "chaosd")
_HOUSE = "TEST_CHAOSD_WHEELHOUSE"  # where the build beside writes: the workers inherit it
_RUN = pytest.StashKey[tuple[subprocess.Popen[bytes], Path]]()


def copy_sources(src: Path) -> Path:
    """A copy of SOURCES in ``src``: building writes build/ and *.egg-info beside the sources."""
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    return src


def wheel_args(src: Path, out: Path) -> list[str]:
    """pip's arguments to build the wheel from this environment, which holds every package the build backend asks
    for (test_install.py checks it): pip's isolated build environment would be the same, installed afresh."""
    return ["-q", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)]


def built_beside(deadline: float = 600.0) -> Path | None:
    """The wheel the build beside made, once it is done (None when there is no build beside)."""
    house = os.environ.get(_HOUSE)
    if not house:
        return None
    rc = Path(house) / "rc"  # written, whole, when the build ends
    wait_for(rc.exists, deadline, "the wheel built beside the suite")
    log = (Path(house) / "log").read_text(errors="replace")
    assert rc.read_text().strip() == "0", log[-4000:]
    (wheel,) = (Path(house) / "dist").glob("chaosd-*.whl")
    return wheel


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("python_versions") or hasattr(config, "workerinput"):
        return  # not a whole-suite run, or an xdist worker: the controller starts it once
    house = Path(tempfile.mkdtemp(prefix="chaosd-wheel-"))
    src = copy_sources(house / "src")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    script = 'nice -n 19 "$@" > log 2>&1; echo $? > rc.tmp && mv rc.tmp rc'
    command = ["sh", "-c", script, "sh", sys.executable, "-m", "pip", *wheel_args(src, house / "dist")]
    proc = subprocess.Popen(command, cwd=house, env=env, start_new_session=True)  # a group: pip and its compilers
    os.environ[_HOUSE] = str(house)
    config.stash[_RUN] = (proc, house)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is None:
        return
    proc, house = run
    if proc.poll() is None:  # the session ended first (interrupted, or the install test was not run)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    shutil.rmtree(house, ignore_errors=True)
