"""House rules a reviewer would otherwise check by hand: the clock is injected, imports point one way, no file
imports itself round a cycle, and nothing outgrows its limits (the plan and the limits: tests/house.py)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import house
import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "chaosd"
BANNED = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("asyncio", "sleep")}


def _modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py"]


def test_only_the_clock_module_reads_time_or_sleeps() -> None:
    offenders = []
    for path in _modules():
        if path.name == "clock.py":
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


# What asyncio keeps to itself: its loop's iteration and state, its handles' slots, its futures' protocol flag.
ASYNCIO_INTERNALS = {
    "_run_once",
    "_scheduled",
    "_ready",
    "_asyncio_future_blocking",
    "_process_events",
    "_clock_resolution",
    "_timer_cancelled_count",
    "_stopping",
    "_when",
    "_callback",
    "_source_traceback",
    "_timer_handle_cancelled",
    "_set_running_loop",
    "_get_running_loop",
    "_enter_task",
    "_leave_task",
    "_register_task",
}


def test_no_private_asyncio_anywhere() -> None:
    """chaosd uses asyncio's public interface only: no name asyncio keeps to itself (on any object: the loop's,
    a handle's, a future's), and no underscore name of the asyncio package or its modules."""
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ASYNCIO_INTERNALS:
                offenders.append(f"{path.name}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in ASYNCIO_INTERNALS:
                offenders.append(f"{path.name}:{node.lineno} def {node.name}")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
                and node.attr.startswith("_")
            ):
                offenders.append(f"{path.name}:{node.lineno} asyncio.{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asyncio"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if (node.module or "") != "asyncio" or private:
                    offenders.append(f"{path.name}:{node.lineno} from {node.module} import ...")
    assert offenders == []
    # The negative control: the check sees a loop's private heap and a private asyncio name.
    probe = ast.parse("loop._scheduled.append(x)\nasyncio._set_running_loop(loop)")
    seen = [n for n in ast.walk(probe) if isinstance(n, ast.Attribute) and n.attr in ASYNCIO_INTERNALS]
    assert len(seen) == 2


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
        "from chaosd.cli.main import main\n"
        "status = main(['faults', '--addr', 'http://127.0.0.1:9'])\n"
        "engine = ('numpy', 'aiohttp', 'chaosd.config', 'chaosd.pipeline', 'chaosd.experiment', 'chaosd.faults')\n"
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
    assert (
        _offenders("api", ("chaosd.pipeline", "chaosd.backends", "chaosd.faults.injector", "chaosd.experiment.runner"))
        == []
    )


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


# --- the plan: packages in import order, no cycle of files, the limits ---------------------------------------------


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _files() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _edges(files: dict[str, Path]) -> dict[str, set[str]]:
    """Each chaosd module's chaosd imports, at any depth (type-only and function-level ones included): the module
    named, or for ``from package import name`` the submodule ``name`` where there is one."""
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "chaosd":
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "chaosd"]
            out.update(t for t in targets if t in files and t != name)
        edges[name] = out
    return edges


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in house.ORDER else None


def test_the_plan_names_every_package() -> None:
    found = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert found == sorted(house.ORDER)


def test_every_package_says_what_it_owns() -> None:
    bare = [
        str(p.relative_to(PACKAGE.parent))
        for p in PACKAGE.rglob("__init__.py")
        if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert bare == []


def test_imports_point_down_the_plan_only() -> None:
    offenders = []
    for module, targets in _edges(_files()).items():
        me = _package(module)
        for target in sorted(targets):
            other = _package(target)
            if me is not None and other is not None and house.ORDER.index(other) > house.ORDER.index(me):
                offenders.append(f"{module} imports {target}")
    assert offenders == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_cycle_of_files() -> None:
    assert _cycles(_edges(_files())) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    # Negative control for the test above.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_few_modules_lie_flat() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= house.FLAT_MODULES, flat


def _over(limit: int, measure: dict[str, int]) -> set[str]:
    return {name for name, size in measure.items() if size > limit}


def _sizes(package: Path = PACKAGE) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in package.rglob("*.py"):
        rel = str(path.relative_to(package.parent))
        text = path.read_text()
        modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                # A method's overloads are its signature, not methods of their own: one name, one method.
                methods = {b.name for b in node.body if isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)}
                classes[f"{rel}:{node.name}"] = len(methods)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                key = f"{rel}:{node.name}"
                functions[key] = max(functions.get(key, 0), node.end_lineno - node.lineno + 1)
    return modules, classes, functions


@pytest.mark.parametrize(
    ("what", "limit"),
    [("modules", house.MODULE_LINES), ("classes", house.CLASS_METHODS), ("functions", house.FUNCTION_LINES)],
)
def test_nothing_outgrows_its_limit(what: str, limit: int) -> None:
    modules, classes, functions = _sizes()
    assert _over(limit, {"modules": modules, "classes": classes, "functions": functions}[what]) == set()


def test_the_size_rule_sees_what_outgrows_it(tmp_path: Path) -> None:
    # Negative control for the test above: one method over is over, and a method's overloads count once.
    package = tmp_path / "pkg"
    package.mkdir()
    methods = "".join(f"    def m{i}(self) -> None: ...\n" for i in range(house.CLASS_METHODS))
    overloads = "    @overload\n    def m0(self, x: int) -> None: ...\n" * 3
    (package / "fits.py").write_text(f"class Fits:\n{overloads}{methods}")
    (package / "big.py").write_text(f"class Big:\n{methods}    def one_more(self) -> None: ...\n")
    long_body = "".join(f"    x{i} = {i}\n" for i in range(house.FUNCTION_LINES))
    (package / "long.py").write_text(f"def long() -> None:\n{long_body}" + "\n" * house.MODULE_LINES)
    modules, classes, functions = _sizes(package)
    assert _over(house.CLASS_METHODS, classes) == {"pkg/big.py:Big"}
    assert _over(house.FUNCTION_LINES, functions) == {"pkg/long.py:long"}
    assert _over(house.MODULE_LINES, modules) == {"pkg/long.py"}


def test_domain_errors_carry_no_http_status() -> None:
    # Domain code says what went wrong (chaosd/core/errors.py: NotFound, Conflict, Unavailable); one table in
    # chaosd/api/app.py says how HTTP answers it.
    errors = {"ChaosdError", "ConfigError", "ScenarioError", "FaultError", "NotFound", "Conflict", "Unavailable"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "api":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in errors:
                offenders += [f"{path.name}:{node.lineno}" for k in node.keywords if k.arg in ("status", "code")]
            if isinstance(node, ast.Constant) and node.value in (404, 409, 422, 503) and path.name == "errors.py":
                offenders.append(f"{path.name}:{node.lineno} {node.value}")
    assert offenders == []


def test_tests_mirror_the_packages() -> None:
    # tests/unit/<package>/ for tests that run chaosd's code in this process, tests/system/ for those that start
    # processes or servers, tests/meta/ for the house rules, the docs and the README's commands.
    tests = PACKAGE.parent / "tests"
    assert len(list(tests.glob("test_*.py"))) <= house.TOP_TEST_FILES
    assert {p.name for p in (tests / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"} <= set(house.ORDER)
    assert all(list(d.rglob("test_*.py")) for d in (tests / "unit", tests / "system", tests / "meta"))


def test_the_development_guide_draws_the_plan() -> None:
    doc = (PACKAGE.parent / "docs" / "development.md").read_text()
    drawn = doc.split("<!-- house: begin -->\n```", 1)[1].split("```\n<!-- house: end -->", 1)[0]
    assert drawn == house.diagram()
    limits = (
        f"no class over {house.CLASS_METHODS} methods, no module over {house.MODULE_LINES} lines,"
        f" no function over {house.FUNCTION_LINES} lines"
    )
    assert limits in " ".join(doc.split())
