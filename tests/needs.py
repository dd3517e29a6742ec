"""What a test needs from the machine: a program on PATH or an importable module.

A missing one skips the test on a developer's machine, and fails it where ``CI`` is set: a skip there would let a
fresh machine that lacks a package pass the suite without running the tests that need it. ``tests/conftest.py``
applies the same rule to ``pytest.importorskip``.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["in_ci", "missing", "module", "program"]

DEBIAN = "apt-get install prometheus prometheus-alertmanager docker-compose chromium redis-server npm"
TEST_EXTRA = "python3 -m pip install -e '.[test]'"


def in_ci() -> bool:
    """``CI`` set to anything but empty, 0, false or no (GitHub Actions, GitLab and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def missing(what: str, install: str) -> NoReturn:
    """Skip for a missing dependency, or fail where CI is set."""
    reason = f"{what} is missing ({install})"
    if in_ci():
        pytest.fail(f"{reason}; CI is set, so the install step must provide it", pytrace=False)
    pytest.skip(reason, allow_module_level=True)  # in a test or at a module's top alike


def program(name: str, *alternatives: str, install: str = DEBIAN) -> str:
    """The path of the first of ``name`` and ``alternatives`` found on PATH."""
    for candidate in (name, *alternatives):
        path = shutil.which(candidate)
        if path is not None:
            return path
    missing(f"the program {name}", install)


def module(name: str, install: str = TEST_EXTRA) -> ModuleType:
    """The module, imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(f"the Python module {name}", install)
