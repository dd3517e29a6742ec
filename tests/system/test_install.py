"""``pip install chaosd`` as a user runs it: the wheel built from this tree, installed with its dependencies into a
fresh virtual environment (pip's cache makes it quick). What comes in (no gRPC, no Redis), the version it reports,
and that the default daemon and an offline run work with nothing more; the Redis backend asks for its extra.

The venv has no pip of its own (``venv --without-pip``): this interpreter's pip installs into it (``--python``),
and nothing is byte-compiled, which halves the install's time.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tarfile
import threading
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from daemon_harness import ROOT, wait_for
from packaging.requirements import Requirement
from wheel_beside import SOURCES, built_beside, copy_sources, wheel_args

import chaosd
import chaosd.native
from chaosd.cli.exits import EXIT_EXPECTATION, EXIT_OK

pytestmark = pytest.mark.slow  # the wheel's build (about a minute, or beside the suite) and the venv's fill, once

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
GOLDEN = ROOT / "tests" / "golden" / "reports"
NICE_CPU = 10  # the niceness tests/conftest.py gives CPU-bound tests


@dataclass(frozen=True)
class Venv:
    root: Path
    wheel: Path
    work: Path  # an empty working directory: no source tree on sys.path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    @property
    def chaosd(self) -> str:
        return str(self.root / "bin" / "chaosd")

    def env(self, **extra: str) -> dict[str, str]:
        """This environment less PYTHONPATH (which points at a checkout) and any CHAOSD_ setting."""
        keep = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("CHAOSD_")}
        return keep | extra

    def run(self, *argv: str, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=self.work, env=self.env(**extra), capture_output=True, text=True, timeout=timeout, check=False
        )

    def distributions(self) -> dict[str, str]:
        code = "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))"
        done = self.run(self.python, "-c", code)
        assert done.returncode == 0, done.stderr
        return {name.lower().replace("_", "-"): v for name, v in json.loads(done.stdout).items()}


def _pip(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """pip at nice 10, as the suite's CPU-bound tests run (tests/conftest.py): a wheel's build compiles for most of a
    minute, beside real-time tests that a busy CPU stalls."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(
        ["nice", "-n", str(NICE_CPU), sys.executable, "-m", "pip", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-4000:])
    return done


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    tmp = tmp_path_factory.mktemp("install")
    wheel = built_beside()  # a whole-suite run builds it beside from the start (tests/wheel_beside.py)
    if wheel is None:
        _pip(*wheel_args(copy_sources(tmp / "src"), tmp / "dist"), cwd=tmp)
        (wheel,) = (tmp / "dist").glob("chaosd-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=60)
    _pip("--python", str(tmp / "venv" / "bin" / "python"), "install", "-q", "--no-compile", str(wheel), cwd=tmp)
    (tmp / "work").mkdir()
    yield Venv(tmp / "venv", wheel, tmp / "work")


def _backend(src: Path, hook: str, *argv: str) -> str:
    """The last line a hook of the build backend prints, called in ``src`` as a front end calls it (``b`` is the
    backend; ``argv``, the hook's arguments, are in sys.argv), with the extensions on (a wheel's settings)."""
    code = f"import json, sys; sys.path[:0] = ['build_backend']; import chaosd_build as b; print({hook})"
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=src,
        env={k: v for k, v in os.environ.items() if k != "CHAOSD_NO_EXTENSIONS"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.splitlines()[-1]


def test_the_wheel_is_built_with_what_its_backend_asks_for(tmp_path: Path) -> None:
    """The wheel above is built without pip's isolated build environment, from this one: each requirement the
    backend gives pip for a wheel (mypy, the stubs and the dependencies mypyc types the modules with) is installed
    here, so the build is the one pip would make."""
    static = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    asked = json.loads(_backend(copy_sources(tmp_path / "src"), "json.dumps(b.get_requires_for_build_wheel())"))
    requires = [Requirement(r) for r in [*static, *asked]]
    names = {r.name.lower() for r in requires}
    assert {"setuptools", "mypy", "types-pyyaml", "numpy", "pydantic"} <= names, names
    missing = [str(r) for r in requires if not r.specifier.contains(version(r.name), prereleases=True)]
    assert missing == []


def test_a_plain_install_brings_no_grpc_and_no_redis_and_their_extras_do(venv: Venv) -> None:
    installed = venv.distributions()
    assert "chaosd" in installed and "opentelemetry-exporter-otlp-proto-http" in installed
    assert [name for name in installed if "grpc" in name] == []
    assert [name for name in installed if "redis" in name] == []
    # Control: the extras bring exactly what the plain install leaves out (what pip would add to this venv).
    report = _pip(
        "--python",
        venv.python,
        "install",
        "-q",
        "--dry-run",
        "--report",
        "-",
        f"{venv.wheel}[otlp-grpc,redis]",
        cwd=venv.work,
    )
    added = {item["metadata"]["name"].lower() for item in json.loads(report.stdout)["install"]}
    assert {"grpcio", "opentelemetry-exporter-otlp-proto-grpc", "redis", "hiredis"} <= added, added


def test_chaosd_version_is_the_installed_distributions_which_is_pyprojects(venv: Venv) -> None:
    done = venv.run(venv.chaosd, "--version")
    assert done.returncode == 0, done.stderr
    # The wheel's hot path is compiled (mypyc); this checkout's editable install is plain Python.
    assert done.stdout.strip() == f"chaosd {venv.distributions()['chaosd']} (compiled)"
    assert venv.distributions()["chaosd"] == PYPROJECT["version"]
    assert chaosd.native.build() == "pure Python"
    # The checkout's own import agrees with its installed metadata (an editable install of this tree).
    assert chaosd.__version__ == version("chaosd") == PYPROJECT["version"]
    # Control: the number is read from the distribution's metadata at run time, not written in the code.
    (metadata,) = venv.root.glob("lib/python*/site-packages/chaosd-*.dist-info/METADATA")
    original = metadata.read_text()
    try:
        metadata.write_text(original.replace(f"\nVersion: {PYPROJECT['version']}\n", "\nVersion: 9.9.9.dev7\n", 1))
        assert venv.run(venv.chaosd, "--version").stdout.strip() == "chaosd 9.9.9.dev7 (compiled)"
    finally:
        metadata.write_text(original)


def test_the_default_daemon_and_an_offline_run_work_without_redis(venv: Venv) -> None:
    report = venv.work / "offline.json"
    done = venv.run(venv.chaosd, "run", "--duration", "60s", "--quiet", "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text())["tasks"]["completed"] > 0
    # The shipped scenarios come with the package: a user of the wheel runs them by name.
    shipped = venv.run(venv.chaosd, "run", "baseline", "--quiet", "--report", str(venv.work / "baseline.json"))
    assert shipped.returncode == 0, shipped.stderr
    assert json.loads((venv.work / "baseline.json").read_text())["scenario"] == "baseline"

    env = venv.env(CHAOSD_API__PORT="0", CHAOSD_STORAGE__PATH=str(venv.work / "data" / "chaosd.db"))
    proc = subprocess.Popen(
        [venv.chaosd], cwd=venv.work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True).start()

    def listening() -> bool:
        while not lines.empty():
            seen.append(lines.get())
        return any("listening on http://127.0.0.1:" in line for line in seen) or proc.poll() is not None

    try:
        wait_for(listening, 30, "the daemon listening", lambda: "".join(seen))
        line = next(line for line in seen if "listening on http://127.0.0.1:" in line)
        base = line.split("listening on ")[1].split()[0]
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0, "".join(seen)


def test_the_compiled_wheel_writes_every_golden_report(venv: Venv) -> None:
    """The wheel's compiled hot path gives the answers the plain Python of this checkout gives: each shipped
    scenario's report, for its own seed, is the golden file's bytes (test_golden_reports.py holds the plain side
    to them)."""
    goldens = sorted(GOLDEN.glob("*.json"))
    assert len(goldens) == len(list((ROOT / "scenarios").glob("*.yaml")))

    def report(name: str, *extra: str) -> bytes:
        out = venv.work / f"golden-{name}.json"
        # At nice 10, as the suite's CPU-bound tests run: eleven runs of CPU work beside the real-time tests.
        done = venv.run(
            "nice", "-n", str(NICE_CPU), venv.chaosd, "run", name, "--quiet", "--report", str(out), *extra, timeout=120
        )
        # retry_storm collapses by design: its run fails its verdict (exit 3) and still writes the report
        assert done.returncode in (EXIT_OK, EXIT_EXPECTATION), done.stdout + done.stderr
        return out.read_bytes()

    moved = [golden.stem for golden in goldens if report(golden.stem) != golden.read_bytes()]
    assert moved == []
    # Control: the comparison sees a report that moved (the same scenario on another seed).
    assert report("baseline", "--seed", "7") != (GOLDEN / "baseline.json").read_bytes()


def test_the_redis_backend_without_its_package_names_the_extra_and_exits_2(venv: Venv) -> None:
    extra = "pip install 'chaosd[redis]'"
    daemon = venv.run(venv.chaosd, "--port", "0", CHAOSD_BACKEND__KIND="redis")
    worker = venv.run(venv.chaosd, "worker")
    for done in (daemon, worker):
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert (
            done.stderr == f"chaosd: error: configuration: backend.kind: 'redis' needs the redis package, "
            f"which chaosd installs only with it: {extra}\n"
        )
        assert "Traceback" not in done.stderr
    # Control: where redis is installed (this test environment) the same check lets the backend through.
    check = subprocess.run(
        [sys.executable, "-c", "from chaosd.backends import require_redis; require_redis()"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr


def test_the_wheel_ships_its_license_its_type_marker_and_the_arenas_page(venv: Venv) -> None:
    with zipfile.ZipFile(venv.wheel) as wheel:
        names = set(wheel.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(f"{info}/METADATA").decode()
        shipped_license = wheel.read(f"{info}/licenses/LICENSE")
    assert "chaosd/py.typed" in names  # PEP 561: mypy reads chaosd's own annotations
    assert shipped_license == (ROOT / "LICENSE").read_bytes()
    assert "\nLicense-Expression: Apache-2.0\n" in metadata and "\nLicense-File: LICENSE\n" in metadata
    static = {p.relative_to(ROOT).as_posix() for p in (ROOT / "chaosd" / "arena" / "static").iterdir() if p.is_file()}
    assert static and static <= names
    # Control: what package-data does not name stays out (the tests, the docs, the compose files).
    assert not any(n.startswith(("tests/", "docs/", "config/")) for n in names)


def _sdist_members(src: Path, out: Path) -> set[str]:
    """The files of the source distribution of ``src`` (written to ``out``), built by the backend's own hook."""
    name = _backend(src, "b.build_sdist(sys.argv[1])", str(out))
    with tarfile.open(out / name) as sdist:
        return {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}


def test_the_source_distribution_holds_what_the_wheel_is_built_from(tmp_path: Path) -> None:
    """pip builds a wheel from the sdist it downloads: the sdist must hold every file this module builds one from,
    the build backend (pyproject.toml's ``backend-path``) among them."""
    src = copy_sources(tmp_path / "src")
    needed = {p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()}
    assert needed - _sdist_members(src, tmp_path) == set()
    # Control: without MANIFEST.in (in a fresh copy: the first build's egg-info remembers what it listed), setuptools
    # leaves the backend out, and pip could not build the wheel.
    bare = copy_sources(tmp_path / "bare")
    (bare / "MANIFEST.in").unlink()
    assert "build_backend/chaosd_build.py" in needed - _sdist_members(bare, tmp_path)


def test_the_image_builds_from_the_same_sources() -> None:
    """The Dockerfile copies what this module builds the wheel from: without LICENSE, setuptools builds a wheel
    that lacks it (it only warns)."""
    copied = {
        name
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for name in line.split()[1:-1]
    }
    assert set(SOURCES) <= copied, set(SOURCES) - copied
