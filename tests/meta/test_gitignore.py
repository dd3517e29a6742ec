"""What chaosd writes by default into the directory it runs in is ignored by git: run in a clone, a user's
``git status`` shows none of it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from needs import program

from chaosd.config.settings import load_settings


def _chaosd(cwd: Path, *argv: str) -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "chaosd", *argv],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (argv, done.stdout, done.stderr)


def test_the_files_chaosd_writes_by_default_are_ignored_by_git(tmp_path: Path) -> None:
    git = program("git", install="apt-get install git")
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    subprocess.run([git, "init", "-q"], cwd=tmp_path, check=True)
    _chaosd(tmp_path, "run", "baseline", "--duration", "3s", "--warmup", "1s", "--quiet")
    _chaosd(tmp_path, "report", "chaosd-report.json", "--html")
    _chaosd(
        tmp_path,
        "sweep",
        "baseline",
        "--param",
        "load.rate=50,100",
        "--duration",
        "3s",
        "--warmup",
        "1s",
        "--quiet",
        "--jobs",
        "1",
    )
    written = sorted(p.name for p in tmp_path.iterdir() if p.name not in {".git", ".gitignore"})
    assert written == ["chaosd-report.html", "chaosd-report.json", "sweep.html", "sweep.json"]
    status = subprocess.run(
        [git, "status", "--porcelain", "--untracked-files=all"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert status.stdout.splitlines() == ["?? .gitignore"]
    # The daemon's defaults too: its report, and its SQLite history under storage.path.
    s = load_settings(None)
    for path in (s.daemon.report, s.run.report, s.storage.path, f"{s.storage.path}.lock", "chaosd-token"):
        ignored = subprocess.run([git, "check-ignore", "-q", "--no-index", str(path)], check=False, cwd=tmp_path)
        assert ignored.returncode == 0, f"{path} is not ignored by .gitignore"
