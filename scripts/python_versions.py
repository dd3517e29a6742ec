"""Byte identity across Python versions: every shipped scenario's report, under this interpreter and under each
other version ``requires-python`` admits that this machine has, compared byte for byte.

    python3 scripts/python_versions.py              # all scenarios, every other version, and the contract tests
    python3 scripts/python_versions.py --no-tests   # reports only
    python3 scripts/python_versions.py --against tests/golden/reports   # the other versions against the goldens

``--against DIR`` takes the reports in DIR (``<scenario>.json``) as this interpreter's instead of running them again:
the test suite checks that this interpreter writes the golden reports, so the other versions are compared with those.

Each other version runs in a venv under ``~/.cache/chaosd/venvs/`` (``$CHAOSD_VENVS``; made on first use,
remade when the dependencies change), holding chaosd's dependencies at the versions this interpreter has;
chaosd itself runs from this working tree, so every version runs the same code. Exit status: 0 all identical,
1 a report differs or a run or test failed, 2 an interpreter is missing or a venv could not be made.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaosd.cli.exits import EXIT_EXPECTATION

ROOT = Path(__file__).resolve().parent.parent
# Outside the checkout by default, so a fresh clone reuses them; CHAOSD_VENVS moves them.
VENVS = Path(os.environ.get("CHAOSD_VENVS") or Path.home() / ".cache" / "chaosd" / "venvs")
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
TIMINGS = VENVS / "timings.json"  # the last run's seconds per scenario: the longest start first
TESTS = ("tests/unit/core/test_engine.py", "tests/system/test_clock.py")


class Unavailable(Exception):
    """An interpreter or a venv this run needs cannot be had (exit status 2)."""


@dataclass(frozen=True)
class Run:
    """One child process: a scenario's report, or the contract tests, under one version."""

    version: str
    python: str
    scenario: str | None  # None: the tests
    out: Path | None = None


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def supported_versions(project: dict[str, Any]) -> list[str]:
    """The minor versions ``requires-python`` admits that this machine has (pyenv's or on PATH): from its floor
    up to its bound, or to the newest installed where it has none."""
    spec = project["project"]["requires-python"]
    low, high = re.search(r">=\s*3\.(\d+)", spec), re.search(r"<\s*3\.(\d+)", spec)
    if low is None:
        raise Unavailable(f"requires-python {spec!r} has no floor: give it one (>=3.X)")
    if high is not None:
        return [f"3.{minor}" for minor in range(int(low.group(1)), int(high.group(1)))]
    installed = {m.group(1) for p in PYENV.glob("3.*") if (m := re.match(r"3\.(\d+)\.", p.name + "."))}
    installed |= {str(minor) for minor in range(int(low.group(1)), 40) if shutil.which(f"python3.{minor}")}
    return [f"3.{minor}" for minor in sorted(int(m) for m in installed) if minor >= int(low.group(1))]


def find_python(version: str) -> str:
    """An interpreter of ``version``: pyenv's newest patch release, else ``python3.X`` on PATH."""
    candidates = [str(p / "bin" / "python") for p in sorted(PYENV.glob(f"{version}.*"), key=_patch, reverse=True)]
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for exe in candidates:
        if Path(exe).exists() and _version_of(exe) == version:
            return exe
    raise Unavailable(
        f"no Python {version} found (looked for {PYENV}/{version}.*/bin/python and python{version} on PATH)"
    )


def _patch(path: Path) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in path.name.split("."))


def _version_of(exe: str) -> str | None:
    try:
        done = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def requirements(project: dict[str, Any]) -> list[str]:
    """chaosd's dependencies, and pytest with the plugins its settings name (for the contract tests)."""
    tests = [r for r in project["project"]["optional-dependencies"]["test"] if r.startswith("pytest")]
    return [*project["project"]["dependencies"], *tests]


def constraints() -> str:
    """This interpreter's installed distributions as pins, so each venv has the same library versions."""
    pins = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and re.sub(r"[-_.]+", "-", name).lower() not in ("chaosd", "pip", "setuptools", "wheel"):
            pins.add(f"{name}=={dist.version}")
    return "".join(f"{pin}\n" for pin in sorted(pins, key=str.lower))


def ensure_venv(version: str, base: str, reqs: list[str], pins: str) -> str:
    """The venv's interpreter for ``version``, made (or remade) unless the one there has these requirements."""
    venv = VENVS / f"py{version}"
    python = venv / "bin" / "python"
    stamp = venv / "chaosd-requirements.sha256"
    digest = hashlib.sha256(json.dumps([version, reqs, pins]).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest and _version_of(str(python)) == version:
        return str(python)
    started = time.perf_counter()
    print(f"python {version}: making {venv} (once; pip installs chaosd's dependencies)", flush=True)
    steps = [
        [base, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(venv / "pins.txt"), *reqs],
    ]
    for i, step in enumerate(steps):
        if i == 1:
            (venv / "pins.txt").write_text(pins)
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise Unavailable(f"python {version}: {' '.join(step[:4])} … failed:\n{done.stdout}{done.stderr}")
    stamp.write_text(digest)
    print(f"python {version}: {venv} ready in {time.perf_counter() - started:.0f} s", flush=True)
    return str(python)


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    """The JSON path of the first place ``a`` and ``b`` differ, in ``a``'s order; None if they are equal."""
    if type(a) is not type(b):
        return path
    if isinstance(a, dict):
        for key in a:
            if key not in b:
                return f"{path}.{key}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        extra = next((key for key in b if key not in a), None)
        if extra is not None:
            return f"{path}.{extra}"
        return None if list(a) == list(b) else f"{path} (key order)"
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None if len(a) == len(b) else f"{path}[{min(len(a), len(b))}]"
    return None if a == b else path


def compare(reference: Path, other: Path) -> str:
    """``identical``, or ``DIFFERS at`` the first differing JSON path."""
    mine, theirs = reference.read_bytes(), other.read_bytes()
    if mine == theirs:
        return "identical"
    where = first_difference(json.loads(mine), json.loads(theirs))
    return f"DIFFERS at {where}" if where else "DIFFERS in bytes only (the same JSON, written differently)"


def execute(run: Run) -> tuple[int, str, float]:
    """Runs one child from the repository root, this working tree's chaosd first on its path."""
    if run.scenario is None:
        cmd = [run.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    else:
        assert run.out is not None
        cmd = [run.python, "-m", "chaosd", "run", run.scenario, "--quiet", "--report", str(run.out)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(ROOT)
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    output = (done.stdout + done.stderr).strip()
    return done.returncode, output, time.perf_counter() - started


def _last_timings() -> dict[str, float]:
    try:
        timings = json.loads(TIMINGS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in timings.items()} if isinstance(timings, dict) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--no-tests", action="store_true", help="skip the contract tests under the other versions")
    parser.add_argument(
        "--against", type=Path, metavar="DIR", help="compare with the reports in DIR instead of running this version"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="children at once (default: CPUs)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    project = _pyproject()
    try:
        versions = supported_versions(project)
        if here not in versions:
            raise Unavailable(f"this is Python {here}; run this script with one of {', '.join(versions)}")
        others = [v for v in versions if v != here]
        bases = {v: find_python(v) for v in others}
        reqs, pins = requirements(project), constraints()
        with concurrent.futures.ThreadPoolExecutor(len(others) or 1) as pool:
            pythons = dict(zip(others, pool.map(lambda v: ensure_venv(v, bases[v], reqs, pins), others), strict=True))
    except Unavailable as exc:
        print(f"python_versions: {exc}", file=sys.stderr)
        return 2

    scenarios = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").glob("*.yaml"))
    timings = _last_timings()
    scenarios.sort(key=lambda s: -timings.get(s, 0.0))  # longest first: the last to finish is a short one
    failed = False
    with tempfile.TemporaryDirectory(prefix="chaosd-versions-") as tmp:
        mine = [] if args.against is not None else [(here, sys.executable)]
        runs = [
            Run(version, python, scenario, Path(tmp) / f"{Path(scenario).stem}-{version}.json")
            for scenario in scenarios
            for version, python in [*mine, *pythons.items()]
        ]
        if not args.no_tests:
            runs += [Run(version, python, None) for version, python in pythons.items()]
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = dict(zip(runs, pool.map(execute, runs), strict=True))

        def wrote_report(run: Run) -> bool:
            # A scenario whose run fails its verdict (exit 3: retry_storm collapses) still writes its report.
            status = results[run][0]
            return status == 0 or (run.scenario is not None and status == EXIT_EXPECTATION)

        for run, (status, output, seconds) in results.items():
            if not wrote_report(run):
                failed = True
                what = run.scenario or "contract tests"
                tail = "\n    ".join(output.splitlines()[-15:])
                print(f"{what} on {run.version}: FAILED (exit {status}) after {seconds:.0f} s\n    {tail}")
        for scenario in scenarios:
            if args.against is not None:
                reference = Run("golden", sys.executable, scenario, args.against / f"{Path(scenario).stem}.json")
                if not reference.out or not reference.out.is_file():
                    failed = True
                    print(f"{scenario:<36} no report {reference.out} to compare with")
                    continue
            else:
                reference = next(r for r in runs if r.scenario == scenario and r.version == here)
                if not wrote_report(reference):
                    continue
            for run in runs:
                if run.scenario != scenario or run.version == here or not wrote_report(run):
                    continue
                assert reference.out is not None and run.out is not None
                verdict = compare(reference.out, run.out)
                failed = failed or verdict != "identical"
                print(f"{scenario:<36} {reference.version} vs {run.version}: {verdict}")
        for run in runs:
            if run.scenario is None and results[run][0] == 0:
                summary = results[run][1].splitlines()[-1] if results[run][1] else ""
                print(f"{'contract tests':<36} on {run.version}: {summary}")

    times: dict[str, float] = {}
    for run, (_, _, seconds) in results.items():
        if run.scenario is not None:
            times[run.scenario] = max(times.get(run.scenario, 0.0), seconds)
    VENVS.mkdir(parents=True, exist_ok=True)
    TIMINGS.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    verdict = "a report differs or a run failed" if failed else "all reports identical"
    elapsed = time.perf_counter() - started
    versions = ", ".join([here if args.against is None else f"{args.against} ({here})", *pythons])
    print(f"{len(scenarios)} scenarios on {versions}: {verdict} ({elapsed:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
