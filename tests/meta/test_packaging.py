"""What pip decides from the package's metadata: which interpreters may install it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]


def test_requires_python_admits_every_python_from_its_floor_up() -> None:
    """No upper cap: chaosd uses asyncio's public interface only, so a new Python is no reason to refuse it."""
    spec = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    assert all(version in spec for version in ("3.11.0", "3.13.1", "3.14.0", "3.15.0"))
    # The floor holds: an interpreter below it is refused, as pip would refuse it.
    assert "3.10.14" not in spec


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_license_pyproject_declares_is_the_file_beside_it() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not its header


def test_the_changelogs_newest_release_is_pyprojects_version() -> None:
    """Keep a Changelog's form: an Unreleased section first, then the releases, newest first."""
    heads = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert heads[0] == "## [Unreleased]"
    assert heads[1].startswith(f"## [{PROJECT['version']}]"), heads


def test_core_dependencies_leave_grpc_and_redis_to_their_extras() -> None:
    """The meta-package opentelemetry-exporter-otlp pulls the gRPC exporter (and grpcio) in; redis only serves the
    Redis backend. tests/system/test_install.py installs the wheel and looks at what came."""
    names = [re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0].lower() for dep in PROJECT["dependencies"]]
    assert "opentelemetry-exporter-otlp-proto-http" in names
    assert not [n for n in names if n == "opentelemetry-exporter-otlp" or "grpc" in n or "redis" in n], names
    extras = PROJECT["optional-dependencies"]
    assert extras["redis"] == ["redis[hiredis]>=5.0.1"]
    assert extras["otlp-grpc"] == ["opentelemetry-exporter-otlp-proto-grpc>=1.25"]
    assert set(extras["redis"] + extras["otlp-grpc"]) <= set(extras["test"])  # the tests exercise both
