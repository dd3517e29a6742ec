"""chaosd's build backend: setuptools', compiling the hot path with mypyc in a wheel (see chaosd/native.py).

A wheel needs mypy in the build environment and, to type the compiled modules as the project's own type check does,
the project's dependencies and stubs. An editable install compiles nothing and needs neither: its sources are edited
in place, where a compiled copy would go stale. ``CHAOSD_NO_EXTENSIONS=1`` builds plain Python.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - the hooks this backend passes through unchanged
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_wheel,
)

# The compiler, and the stubs mypy needs beyond the project's dependencies (as in the test extra).
_COMPILER = ("mypy>=1.10", "types-PyYAML")
_PLAIN = "CHAOSD_NO_EXTENSIONS"  # read by setup.py, which these hooks run in this process

Config = dict[str, Any] | None


def get_requires_for_build_wheel(config_settings: Config = None) -> list[str]:
    requires: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    if os.environ.get(_PLAIN):
        return requires
    project = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [*requires, *project["dependencies"], *_COMPILER]


def get_requires_for_build_editable(config_settings: Config = None) -> list[str]:
    os.environ[_PLAIN] = "1"
    return list(_setuptools.get_requires_for_build_editable(config_settings))


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Config = None) -> str:
    os.environ[_PLAIN] = "1"
    return str(_setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings))


def build_editable(wheel_directory: str, config_settings: Config = None, metadata_directory: str | None = None) -> str:
    os.environ[_PLAIN] = "1"
    return str(_setuptools.build_editable(wheel_directory, config_settings, metadata_directory))
