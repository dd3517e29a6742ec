"""House rules a reviewer would otherwise check by hand: the clock is injected, imports point one way."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "chaosd"
BANNED = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("asyncio", "sleep")}
# Layers in data-flow order; a module may import only from its own layer or earlier ones.
LAYERS = [
    "errors",
    "config_problems",
    "wire",
    "durations",
    "urls",
    "views",
    "confidence",
    "rng",
    "histogram",
    "event_kinds",
    "events",
    "history",
    "_asyncio_internals",
    "clock",
    "hostwait",
    "handlers",
    "config",
    "redact",
    "dependencies",
    "expectations",
    "scenario",
    "run_timing",
    "pipeline",
    "backends",
    "faults",
    "telemetry",
    "score",
    "verdict",
    "report",
    "runner",
    "plans",
    "cluster",
    "replicate",
    "sweep_view",
    "sweep_params",
    "sweep_chart",
    "sweep",
    "exporters",
    "control",
    "storage",
    "arena",
    "api",
    "daemon",
    "client",
    "cli",
]


def _modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py"]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "chaosd" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def test_only_the_clock_module_reads_time_or_sleeps() -> None:
    offenders = []
    for path in _modules():
        if path.name in ("clock.py", "_asyncio_internals.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in BANNED
            ):
                offenders.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio"):
                for alias in node.names:
                    if (node.module, alias.name) in BANNED:
                        offenders.append(f"{path.name}:{node.lineno} from {node.module} import {alias.name}")
    assert offenders == []


def test_no_global_random() -> None:
    offenders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr != "Random"
            ):
                offenders.append(f"{path.name}:{node.lineno} random.{node.attr}")
    assert offenders == []


def test_imports_point_downstream_only() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        me = _layer(".".join(rel.parts))
        if me is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                other = _layer(node.module)
                if other is not None and other > me:
                    offenders.append(f"{'.'.join(rel.parts)} imports {node.module}")
    assert offenders == []


def test_every_benchmark_and_script_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing in the suite runs them (they take minutes); an API they use that moved must still fail here.
    root = PACKAGE.parent
    for folder in (root / "bench", root / "scripts"):
        monkeypatch.syspath_prepend(str(folder))
        for path in sorted(folder.glob("*.py")):
            spec = importlib.util.spec_from_file_location(f"_checked_{folder.name}_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
            spec.loader.exec_module(module)  # its main() is guarded by __name__
            assert path.name.startswith("_") or callable(getattr(module, "main", None)), f"{path}: no main()"


def test_a_client_command_starts_without_the_engine() -> None:
    # `chaosd faults` and the other client commands talk HTTP with the standard library: importing the engine
    # (config models, pipeline, numpy, aiohttp) would triple their start-up time for nothing. Port 9 (discard)
    # has no listener on loopback, so the command fails with its own error (exit code 4) after importing all it needs.
    code = (
        "import sys\n"
        "from chaosd.cli import main\n"
        "status = main(['faults', '--addr', 'http://127.0.0.1:9'])\n"
        "engine = ('numpy', 'aiohttp', 'chaosd.config', 'chaosd.pipeline', 'chaosd.runner', 'chaosd.faults')\n"
        "print(status, sorted(m for m in sys.modules if m.startswith(engine)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "4 []", done.stdout + done.stderr
    assert "127.0.0.1:9" in done.stderr


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (TYPE_CHECKING blocks and functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _offenders(folder: str, banned: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in sorted((PACKAGE / folder).glob("*.py"))
        for line, module in _imports(path)
        if module.startswith(banned)
    ]


def test_the_faults_see_only_the_runtime_protocol() -> None:
    # The catalogue and the injector break and watch a pipeline through chaosd/faults/runtime.py's Runtime:
    # either backend, or a test's fake, is one to them.
    assert _offenders("faults", ("chaosd.pipeline", "chaosd.backends")) == []


def test_the_api_calls_the_controller_never_the_pipeline() -> None:
    assert _offenders("api", ("chaosd.pipeline", "chaosd.backends", "chaosd.faults.injector", "chaosd.runner")) == []


def test_routes_raise_only_the_http_error_type_for_protocol_errors() -> None:
    # A protocol error (a bad query, a body too large or too slow, a wrong media type) is an HttpError; domain
    # errors (a fault that cannot be injected, a bad scenario) come from the layers below and are mapped in one place.
    domain = {"ChaosdError", "ConfigError", "ScenarioError", "FaultError"}
    offenders = []
    for path in sorted((PACKAGE / "api").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
                if name in domain:
                    offenders.append(f"{path.name}:{node.lineno} raises {name}")
    assert offenders == []
