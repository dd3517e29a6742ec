"""Whether chaosd works with the lowest versions pyproject.toml allows: each direct dependency (the core's, and the
``redis`` and ``otlp-grpc`` extras') pinned to its floor, the rest resolved by pip as usual, in a fresh virtual
environment, then a quick subset of the tests.

    python3 scripts/check_floors.py                  # this interpreter (the floor of requires-python: 3.11)
    python3 scripts/check_floors.py --keep /tmp/f    # keep the venv there, to look into a failure

Not part of .ci/run: it downloads and installs old releases (a minute or more) before its tests run, and the floors
change only when pyproject.toml does. docs/development.md says when to run it. Exit status: 0 the floors install and
the tests pass, 1 they do not, 2 a floor cannot be installed at all.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("redis", "otlp-grpc")
# Quick, and between them they touch each floored dependency: pydantic and PyYAML (config, scenarios), numpy (the
# engine, the score), aiohttp and h11 (the daemon, the fault proxy), prometheus-client and opentelemetry
# (exporters), rich (the CLI's progress), redis (the Redis backend's tests against a real redis-server).
TESTS = (
    "tests/unit/core",
    "tests/unit/cli/test_cli.py",
    "tests/unit/experiment/test_scenarios.py",
    "tests/system/test_golden_reports.py",
    "tests/system/test_exporters.py",
    "tests/system/test_api.py",
    "tests/system/test_dependency_proxy.py",
    "tests/system/test_redis_backend.py",
)
# What the subset imports beyond chaosd itself, at the versions pip picks.
TEST_TOOLS = (
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "hypothesis",
    "httpx",
    "openapi-spec-validator",
    "cryptography",
)
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "chaosd")


def floors(project: dict[str, Any], extras: tuple[str, ...]) -> dict[str, str]:
    """Each direct dependency's name (lower case, no extras) and the version its ``>=`` names."""
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    found = {}
    for requirement in requirements:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", requirement.strip())
        if m is None:
            raise SystemExit(f"check_floors: {requirement!r} names no floor (name>=version)")
        found[m[1].lower().replace("_", "-")] = m[2]
    return found


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(argv), flush=True)
    return subprocess.run(argv, text=True, check=False, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="make the venv here and keep it (default: a temporary folder)")
    parser.add_argument("tests", nargs="*", default=list(TESTS), help="test paths (default: the quick subset)")
    args = parser.parse_args(argv)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = floors(project, EXTRAS)
    work = Path(tempfile.mkdtemp(prefix="chaosd-floors-"))
    venv = args.keep or work / "venv"
    try:
        (work / "src").mkdir()
        for name in SOURCES:  # a copy: building writes build/ and *.egg-info beside the sources
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, work / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / name, work / "src" / name)
        (work / "constraints.txt").write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
        _run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)])
        python = str(venv / "bin" / "python")
        started = time.monotonic()
        pip = [sys.executable, "-m", "pip", "--python", python]
        chaosd = f"{work / 'src'}[{','.join(EXTRAS)}]"
        install = _run(
            [*pip, "install", "-q", "--no-compile", "-c", str(work / "constraints.txt"), chaosd, *TEST_TOOLS]
        )
        if install.returncode != 0:
            print("check_floors: the floors cannot be installed together (pip's message above)", file=sys.stderr)
            return 2
        print(f"installed in {time.monotonic() - started:.0f} s")
        listed = _run([*pip, "list", "--format=freeze"], capture_output=True)
        have = dict(line.lower().replace("_", "-").split("==", 1) for line in listed.stdout.split() if "==" in line)
        off = {n: (f, have.get(n)) for n, f in pins.items() if n not in have or Version(have[n]) != Version(f)}
        for name, floor in pins.items():
            print(f"  {name:40} {floor}")
        if off:
            print(f"check_floors: not at their floors: {off}", file=sys.stderr)
            return 1
        # The tests from this checkout; `python -m` puts it first on sys.path, so chaosd's code is the checkout's too
        # (the wheel was built from it): what the venv changes is every dependency's version.
        tests = _run([python, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *args.tests], cwd=ROOT)
        return 0 if tests.returncode == 0 else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
