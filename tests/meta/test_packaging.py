"""What pip decides from the package's metadata: which interpreters may install it."""

from __future__ import annotations

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
