"""Where CI is set, a test skipped for a missing module or program fails the suite: a fresh machine whose install step
forgot a package must not pass by skipping what needs it. On a developer's machine the same tests skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from needs import in_ci

TESTS = Path(__file__).resolve().parents[1]

PROBE = """
import pytest
from needs import module, program

def test_importorskip():
    pytest.importorskip("chaosd_no_such_module")

def test_module():
    module("chaosd_no_such_module")

def test_program():
    program("chaosd-no-such-program")

def test_other_skip():
    pytest.skip("a skip for another reason stays a skip")
"""


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "ci_gate", "-p", "no:cacheprovider", "test_probe.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_missing_dependency_fails_where_ci_is_set(tmp_path: Path) -> None:
    done = _run(tmp_path, "true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "3 failed, 1 skipped" in done.stdout, done.stdout
    for name in ("test_importorskip", "test_module", "test_program"):
        assert f"FAILED test_probe.py::{name}" in done.stdout
    assert "CI is set" in done.stdout


def test_a_missing_dependency_skips_on_a_developers_machine(tmp_path: Path) -> None:
    done = _run(tmp_path, "false")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 skipped" in done.stdout, done.stdout


def test_ci_is_set_by_any_value_but_the_usual_no(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in (("true", True), ("1", True), ("yes", True), ("", False), ("0", False), ("false", False)):
        monkeypatch.setenv("CI", value)
        assert in_ci() is expected, value
    monkeypatch.delenv("CI")
    assert not in_ci()
