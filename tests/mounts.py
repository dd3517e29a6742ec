"""Filesystems that fail on purpose, for the tests of what chaosd does when its own disk does: a small tmpfs (needs
root, as CI is) and a way to fill it."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["ROOT_ONLY", "fill", "tmpfs"]

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs and sets chattr +i: needs root (CI is root)")


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-R", "-i", str(path)], check=False, capture_output=True)
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # a daemon still holding it: detach anyway


def fill(directory: Path) -> Path:
    """Write a file until the filesystem says it is full (ENOSPC); the file, to free the space with."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
        with pytest.raises(OSError) as full:
            os.write(fd, b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler
