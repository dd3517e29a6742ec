"""Static checks of the Grafana dashboards in dashboards/: structure, datasource, metric names, PromQL syntax.

``panel_queries`` is shared with the end-to-end test that runs every dashboard query against a real Prometheus.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from needs import program

__all__ = ["DASHBOARDS", "DATASOURCE", "PROVISIONED_UID", "iter_panels", "panel_queries"]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "dashboards"
DASHBOARDS = sorted(DASHBOARD_DIR.glob("*.json"))
PROVISIONING = DASHBOARD_DIR / "provisioning"
METRICS_DOC = ROOT / "docs" / "metrics.md"
RULES_FILE = ROOT / "config" / "prometheus" / "rules.yml"
# Every panel, target, annotation and query variable reads the dashboard's datasource variable, so that the
# dashboards import into any Grafana; the variable's default is the datasource dashboards/provisioning/ creates.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PROVISIONED_UID = "chaosd-prometheus"
INSTANCE_MATCHER = 'instance=~"$instance"'
GRID_WIDTH = 24
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# Values that turn a dashboard expression into plain PromQL an instant query (or promtool) accepts.
SUBSTITUTIONS = {"instance": ".*", "__rate_interval": "1m", "__interval": "15s", "__range": "5m"}


def _variable_pattern(name: str) -> re.Pattern[str]:
    # $name, ${name}, ${name:format} and the deprecated [[name]]; "$__interval" must not eat "$__interval_ms".
    n = re.escape(name)
    return re.compile(rf"\$\{{{n}(?::[^}}]*)?\}}|\[\[{n}(?::[^\]]*)?\]\]|\${n}(?![A-Za-z0-9_])")


_SUBSTITUTION_PATTERNS = [(_variable_pattern(name), value) for name, value in SUBSTITUTIONS.items()]
_UNRESOLVED_VARIABLE = re.compile(r"\$\{?[A-Za-z_]|\[\[[A-Za-z_]")
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_METRIC_NAME = re.compile(r"(?<![A-Za-z0-9_:])chaosd[_:][A-Za-z0-9_:]*")
_DOC_ROW = re.compile(r"^\|\s*`(chaosd_[A-Za-z0-9_]+)`\s*\|\s*([a-z]+)")


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def _substitute(expr: str) -> str:
    for pattern, value in _SUBSTITUTION_PATTERNS:
        expr = pattern.sub(value, expr)
    return expr


def _is_prometheus(datasource: Any) -> bool:
    # A target without a datasource inherits the panel's; every panel here names the Prometheus one.
    return datasource is None or (isinstance(datasource, dict) and datasource.get("type") == "prometheus")


def panel_queries(dashboard_path: str | Path) -> list[tuple[str, str]]:
    """(panel title, runnable PromQL) for every Prometheus query of a dashboard, annotation queries included.

    Grafana variables are replaced (``$instance`` → ``.*``, ``$__rate_interval`` → ``1m``, ``$__interval`` →
    ``15s``, ``$__range`` → ``5m``). Annotations appear as ``"annotation: <name>"``. Template-variable queries
    (``label_values(...)``) are Grafana functions, not PromQL, and are left out.
    """
    dashboard = json.loads(Path(dashboard_path).read_text(encoding="utf-8"))
    queries: list[tuple[str, str]] = []
    for panel in iter_panels(dashboard.get("panels", [])):
        if not _is_prometheus(panel.get("datasource")):
            continue
        title = str(panel.get("title") or f"panel {panel.get('id')}")
        for target in panel.get("targets") or []:
            expr = target.get("expr")
            if isinstance(expr, str) and expr.strip() and _is_prometheus(target.get("datasource")):
                queries.append((title, _substitute(expr.strip())))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("builtIn") or not _is_prometheus(annotation.get("datasource")):
            continue
        # Grafana ≥ 10 keeps the query in annotation.target; older dashboards have it at the top level.
        expr = (annotation.get("target") or {}).get("expr") or annotation.get("expr")
        if isinstance(expr, str) and expr.strip():
            queries.append((f"annotation: {annotation.get('name', '?')}", _substitute(expr.strip())))
    return queries


# ---------------------------------------------------------------------------------------------- helpers


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name}: top level is not an object"
    return data


def _query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in iter_panels(dashboard["panels"]) if p.get("type") != "row"]


def _raw_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) for every panel target and annotation, before variable substitution."""
    exprs = [
        (f"panel {p.get('title')!r}", t.get("expr", "")) for p in _query_panels(dashboard) for t in p.get("targets", [])
    ]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        for expr in {(annotation.get("target") or {}).get("expr"), annotation.get("expr")} - {None}:
            exprs.append((f"annotation {annotation.get('name')!r}", expr))
    return exprs


def _mask_strings(expr: str) -> str:
    """The expression with string literals blanked (same length), so label values never look like metrics."""
    return _STRING_LITERAL.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], expr)


def metric_names(expr: str) -> set[str]:
    return set(_METRIC_NAME.findall(_mask_strings(expr)))


def _documented_metrics() -> dict[str, str]:
    """Metric name → type (gauge, counter, histogram) from the table in docs/metrics.md."""
    types = {}
    for line in METRICS_DOC.read_text(encoding="utf-8").splitlines():
        match = _DOC_ROW.match(line)
        if match:
            types[match.group(1)] = match.group(2)
    return types


def _recording_rules() -> set[str]:
    if not RULES_FILE.exists():
        return set()
    data = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8")) or {}
    return {rule["record"] for group in data.get("groups", []) for rule in group.get("rules", []) if "record" in rule}


def _metric_problem(name: str, documented: dict[str, str], rules: set[str]) -> str | None:
    if name in rules:
        return None
    if name in documented:
        if documented[name] == "histogram":
            return f"{name} is a histogram: query {name}_bucket, _sum or _count"
        return None
    for suffix in HISTOGRAM_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and documented.get(base) == "histogram":
            return None
    return f"{name} is neither in docs/metrics.md nor a recording rule in config/prometheus/rules.yml"


def _grid_cells(panel: dict[str, Any]) -> set[tuple[int, int]]:
    g = panel["gridPos"]
    return {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}


@pytest.fixture(scope="module")
def promtool() -> str:
    return program("promtool")


def _promtool_check(promtool: str, exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    rules = [{"record": f"dashboard:q{i:03d}", "expr": expr} for i, expr in enumerate(exprs)]
    rules_file = tmp_path / "dashboard_queries.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}), encoding="utf-8")
    return subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60, check=False
    )


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


# ---------------------------------------------------------------------------------------------- tests


def test_dashboards_exist() -> None:
    assert DASHBOARD_DIR / "chaosd-overview.json" in DASHBOARDS


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_dashboard_identity_and_variable(path: Path) -> None:
    dashboard = _load(path)
    assert dashboard.get("uid") and dashboard.get("title")
    assert dashboard["schemaVersion"] == 39
    assert dashboard["panels"], "no panels"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables)[:2] == ["datasource", "instance"], "the datasource variable first: instance reads it"
    source = variables["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    assert source["current"]["value"] == PROVISIONED_UID, "the provisioned datasource is the default"
    assert source["includeAll"] is False and source["multi"] is False
    instance = variables["instance"]
    query = instance["query"]["query"] if isinstance(instance["query"], dict) else instance["query"]
    assert query == "label_values(chaosd_build_info, instance)"
    assert instance["includeAll"] is True
    assert instance["datasource"] == DATASOURCE


def test_overview_settings() -> None:
    dashboard = _load(DASHBOARD_DIR / "chaosd-overview.json")
    assert dashboard["uid"] == "chaosd-overview"
    assert dashboard["title"] == "chaosd overview"
    assert dashboard["refresh"] == "5s"
    assert dashboard["time"]["from"] == "now-15m"


def test_uids_and_titles_unique() -> None:
    dashboards = [_load(p) for p in DASHBOARDS]
    uids = [d["uid"] for d in dashboards]
    titles = [d["title"] for d in dashboards]
    assert len(set(uids)) == len(uids), uids
    assert len(set(titles)) == len(titles), titles


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_every_panel_target_and_annotation_uses_the_datasource_variable(path: Path) -> None:
    dashboard = _load(path)
    # No datasource named by its uid anywhere (only the variable's default is the provisioned uid).
    assert '"uid": "chaosd-prometheus"' not in path.read_text(encoding="utf-8")
    wrong = [
        f"panel {p.get('id')} {p.get('title')!r}: {p.get('datasource')}"
        for p in iter_panels(dashboard["panels"])
        if p.get("datasource") != DATASOURCE
    ]
    wrong += [
        f"panel {p.get('title')!r} target {t.get('refId')}: {t['datasource']}"
        for p in _query_panels(dashboard)
        for t in p.get("targets", [])
        if "datasource" in t and t["datasource"] != DATASOURCE
    ]
    wrong += [
        f"annotation {a.get('name')!r}: {a.get('datasource')}"
        for a in dashboard.get("annotations", {}).get("list", [])
        if a.get("datasource") != DATASOURCE
    ]
    wrong += [
        f"variable {v.get('name')!r}: {v.get('datasource')}"
        for v in dashboard["templating"]["list"]
        if v.get("type") == "query" and v.get("datasource") != DATASOURCE
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_every_target_has_an_expr(path: Path) -> None:
    dashboard = _load(path)
    problems = []
    for panel in _query_panels(dashboard):
        if not panel.get("targets"):
            problems.append(f"panel {panel.get('title')!r} has no targets")
        for t in panel.get("targets", []):
            if not isinstance(t.get("expr"), str) or not t["expr"].strip():
                problems.append(f"panel {panel.get('title')!r} target {t.get('refId')} has no expr")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_panel_ids_unique_and_grid_positions_valid(path: Path) -> None:
    panels = list(iter_panels(_load(path)["panels"]))
    ids = [p.get("id") for p in panels]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(set(ids)) == len(ids), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    for p in panels:
        g = p.get("gridPos")
        assert isinstance(g, dict), f"panel {p['id']} {p.get('title')!r} has no gridPos"
        assert all(isinstance(g.get(k), int) for k in "hwxy"), f"panel {p['id']}: gridPos {g}"
        assert g["h"] > 0 and g["w"] > 0 and g["x"] >= 0 and g["y"] >= 0, f"panel {p['id']}: gridPos {g}"
        assert g["x"] + g["w"] <= GRID_WIDTH, f"panel {p['id']} {p.get('title')!r} overflows the grid: {g}"
    # Top-level panels must not overlap (panels inside a collapsed row are laid out when it opens).
    taken: dict[tuple[int, int], int] = {}
    for p in _load(path)["panels"]:
        for cell in _grid_cells(p):
            assert cell not in taken, f"panel {p['id']} overlaps panel {taken[cell]} at {cell}"
            taken[cell] = p["id"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_metric_names_are_documented(path: Path) -> None:
    documented, rules = _documented_metrics(), _recording_rules()
    assert documented, "no metrics parsed from docs/metrics.md"
    dashboard = _load(path)
    exprs = _raw_exprs(dashboard)
    exprs += [(f"variable {v['name']!r}", v.get("definition", "")) for v in dashboard["templating"]["list"]]
    problems = sorted(
        {
            f"{where}: {problem}"
            for where, expr in exprs
            for name in metric_names(expr)
            if (problem := _metric_problem(name, documented, rules))
        }
    )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_every_selector_filters_on_the_instance_variable(path: Path) -> None:
    problems = []
    for where, expr in _raw_exprs(_load(path)):
        masked = _mask_strings(expr)
        for match in _METRIC_NAME.finditer(masked):
            selector = re.match(r"\s*\{[^}]*\}", expr[match.end() :])
            if selector is None or INSTANCE_MATCHER not in selector.group(0):
                problems.append(f"{where}: {match.group(0)} lacks {{{INSTANCE_MATCHER}}} in {expr}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_faults_are_annotated_as_regions_from_injection_to_end(path: Path) -> None:
    """Grafana turns a Prometheus annotation's points with a value above 0, a step or less apart, into one region:
    the count of active faults by action gives one region per fault from its injection to its end. Grafana drops
    the zeros itself, so the query keeps them (an instant query of it always answers, as the live test wants)."""
    queries = dict(panel_queries(path))
    assert (
        queries.get("annotation: Faults active") == 'sum by (instance, action) (chaosd_faults_active{instance=~".*"})'
    )
    annotation = next(a for a in _load(path)["annotations"]["list"] if a["name"] == "Faults active")
    assert "{{action}}" in annotation["titleFormat"] and annotation["tagKeys"] == "action,instance"
    assert annotation["useValueForTime"] is False  # the value is a count, not a timestamp
    # The step is chaosd's scrape interval in the shipped prometheus.yml: a region's ends are as sharp as the data.
    prometheus = yaml.safe_load((ROOT / "config" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    (job,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == "chaosd"]
    assert annotation["step"] == annotation["target"]["interval"] == job["scrape_interval"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_panel_queries_are_plain_promql(path: Path) -> None:
    queries = panel_queries(path)
    dashboard = _load(path)
    targets = sum(len(p.get("targets", [])) for p in _query_panels(dashboard))
    annotations = [a for a in dashboard["annotations"]["list"] if not a.get("builtIn")]
    assert len(queries) == targets + len(annotations)
    leftovers = [f"{title}: {expr}" for title, expr in queries if _UNRESOLVED_VARIABLE.search(expr)]
    assert not leftovers, "unresolved Grafana variables:\n" + "\n".join(leftovers)


def test_panel_queries_helper_on_a_synthetic_dashboard(tmp_path: Path) -> None:
    dashboard = {
        "panels": [
            {"id": 1, "type": "row", "title": "r", "collapsed": True, "panels": [
                {"id": 2, "title": "nested", "datasource": DATASOURCE, "targets": [
                    {"refId": "A", "expr": 'rate(m{instance=~"$instance"}[$__rate_interval])'},
                    {"refId": "B", "expr": "  "},
                ]},
            ]},
            {"id": 3, "title": "other", "datasource": {"type": "loki", "uid": "x"}, "targets": [{"expr": "{a=1}"}]},
            {"id": 4, "title": "vars", "targets": [
                {"expr": 'sum_over_time(m{i=~"${instance}"}[$__interval]) + m offset $__range + ${__interval_ms}'},
            ]},
        ],
        "annotations": {"list": [
            {"builtIn": 1, "name": "Annotations & Alerts", "datasource": {"type": "grafana", "uid": "-- Grafana --"}},
            {"name": "new style", "datasource": DATASOURCE, "target": {"expr": "up{i=~\"[[instance]]\"}"}},
            {"name": "old style", "datasource": DATASOURCE, "expr": "changes(x[$__range]) > 0"},
        ]},
    }  # fmt: skip
    path = tmp_path / "d.json"
    path.write_text(json.dumps(dashboard), encoding="utf-8")
    assert panel_queries(path) == [
        ("nested", 'rate(m{instance=~".*"}[1m])'),
        ("vars", 'sum_over_time(m{i=~".*"}[15s]) + m offset 5m + ${__interval_ms}'),
        ("annotation: new style", 'up{i=~".*"}'),
        ("annotation: old style", "changes(x[5m]) > 0"),
    ]


def test_metric_extraction_ignores_label_values() -> None:
    expr = 'histogram_quantile(0.9, sum by (le) (rate(chaosd_task_wait_seconds_bucket{job="chaosd_x"}[1m])))'
    assert metric_names(expr + " / chaosd:queue_saturation:ratio") == {
        "chaosd_task_wait_seconds_bucket",
        "chaosd:queue_saturation:ratio",
    }
    documented = {"chaosd_task_wait_seconds": "histogram", "chaosd_queue_depth": "gauge"}
    assert _metric_problem("chaosd_task_wait_seconds_bucket", documented, set()) is None
    assert _metric_problem("chaosd_task_wait_seconds", documented, set()) is not None
    assert _metric_problem("chaosd_queue_depth_sum", documented, set()) is not None
    assert _metric_problem("chaosd:x", documented, {"chaosd:x"}) is None


def test_every_query_parses_as_promql(promtool: str, tmp_path: Path) -> None:
    queries = [(path.name, title, expr) for path in DASHBOARDS for title, expr in panel_queries(path)]
    result = _promtool_check(promtool, [expr for _, _, expr in queries], tmp_path)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        culprits = [
            f"dashboard:q{i:03d} = {name} / {title!r}: {expr}"
            for i, (name, title, expr) in enumerate(queries)
            if f'"dashboard:q{i:03d}"' in output
        ]
        pytest.fail("promtool rejected dashboard queries:\n" + output + "\n" + "\n".join(culprits))
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_promtool_check_catches_a_broken_query(promtool: str, tmp_path: Path) -> None:
    result = _promtool_check(promtool, ["up", "sum(rate(chaosd_tasks_total[1m])"], tmp_path)
    assert result.returncode != 0
    assert "dashboard:q001" in result.stdout + result.stderr


def test_datasource_provisioning_matches_the_dashboards() -> None:
    data = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text(encoding="utf-8"))
    (source,) = data["datasources"]
    assert source["uid"] == PROVISIONED_UID
    for path in DASHBOARDS:
        variable = next(v for v in _load(path)["templating"]["list"] if v["name"] == "datasource")
        assert variable["current"]["value"] == source["uid"], path.name
    assert source["type"] == DATASOURCE["type"]
    assert source["url"] == "http://prometheus:9090"
    assert source["isDefault"] is True


def test_dashboard_provider_loads_the_mounted_folder() -> None:
    data = yaml.safe_load((PROVISIONING / "dashboards" / "chaosd.yml").read_text(encoding="utf-8"))
    (provider,) = data["providers"]
    assert provider["type"] == "file"
    assert provider["folder"] == "chaosd"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


_STATE_CODE = re.compile(r'(\d+) \* chaosd_detector_state\{[^}]*state="([a-z_]+)"\}')
NO_STATE = "unknown"  # the text of code 0: no state series at all


def _detector_states() -> set[str]:
    from chaosd.admission.detector import DetectorState  # noqa: PLC0415 - the only tests here that need chaosd

    return {s.value for s in DetectorState}


def _state_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in _query_panels(dashboard) if any("chaosd_detector_state" in t["expr"] for t in p["targets"])]


def _state_coverage_problems(panel: dict[str, Any], states: set[str]) -> list[str]:
    """What a panel folding the one-hot detector state gets wrong: a state left out of the folding query, a state
    its value mappings do not name, a code whose mapping names another state, or a mapping that is no state."""
    title = repr(panel["title"])
    codes = {code: state for t in panel["targets"] for code, state in _STATE_CODE.findall(t["expr"])}
    problems = [f"{title}: state {state} not folded into a code" for state in sorted(states - {*codes.values()})]
    if unknown := set(codes.values()) - states:
        problems.append(f"{title}: {sorted(unknown)} are no detector states")
    options = {
        code: option
        for mapping in panel["fieldConfig"]["defaults"]["mappings"]
        for code, option in mapping["options"].items()
    }
    texts = {option.get("text") for option in options.values()}
    problems += [f"{title}: no value mapping names state {state}" for state in sorted(states - texts)]
    if extra := texts - states - {NO_STATE}:
        problems.append(f"{title}: value mappings {sorted(map(str, extra))} are no detector states")
    problems += [
        f"{title}: code {code} maps to {options.get(code, {}).get('text')!r}, not {state!r}"
        for code, state in codes.items()
        if options.get(code, {}).get("text") != state
    ]
    return problems


@pytest.mark.parametrize("path", DASHBOARDS, ids=_ids(DASHBOARDS))
def test_every_detector_state_has_its_code_and_its_name(path: Path) -> None:
    """A state the folding query leaves out sums to 0 and shows as "unknown" (the faults dashboard once showed
    an overload so); every state the detector has is folded into a code, and the code's mapping names it."""
    states = _detector_states()
    panels = _state_panels(_load(path))
    assert [problem for panel in panels for problem in _state_coverage_problems(panel, states)] == []
    assert panels or path.name == "chaosd-stages.json"


@pytest.mark.parametrize("state", sorted(_detector_states()))
def test_a_detector_state_left_out_of_a_panel_is_caught(state: str) -> None:
    """The negative control, for every state: the overview's state panel without the state's fold, or without its
    value mapping."""
    states = _detector_states()
    (panel,) = _state_panels(_load(DASHBOARD_DIR / "chaosd-overview.json"))
    assert _state_coverage_problems(panel, states) == []
    title = repr(panel["title"])
    target = panel["targets"][0]
    term = re.compile(rf'( or )?\d+ \* chaosd_detector_state\{{[^}}]*state="{state}"\}}( or )?')
    expr = term.sub(lambda m: " or " if m.group(1) and m.group(2) else "", target["expr"], count=1)
    assert expr != target["expr"]
    unfolded = {**panel, "targets": [{**target, "expr": expr}]}
    assert _state_coverage_problems(unfolded, states) == [f"{title}: state {state} not folded into a code"]
    (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
    code = next(code for code, option in mapping["options"].items() if option["text"] == state)
    options = {c: option for c, option in mapping["options"].items() if c != code}
    unnamed = {**panel, "fieldConfig": {"defaults": {"mappings": [{**mapping, "options": options}]}}}
    assert _state_coverage_problems(unnamed, states) == [
        f"{title}: no value mapping names state {state}",
        f"{title}: code {code} maps to None, not {state!r}",
    ]


# --------------------------------------------------------------------------- the generator: scripts/dashboard_states.py

GENERATOR = ROOT / "scripts" / "dashboard_states.py"


def _generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def _generator_module() -> Any:
    spec = importlib.util.spec_from_file_location("dashboard_states", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dashboards_are_what_the_generator_writes_from_the_detectors_states() -> None:
    """A state added to the detector cannot be missed: the generator writes every state panel from the detector's
    own states, and the shipped dashboards must be byte for byte what it writes."""
    result = _generate("--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_generator_check_catches_a_state_left_out_and_writes_it_back(tmp_path: Path) -> None:
    for path in DASHBOARDS:
        shutil.copy(path, tmp_path / path.name)
    overview = tmp_path / "chaosd-overview.json"
    dashboard = _load(overview)
    (panel,) = _state_panels(dashboard)
    del panel["fieldConfig"]["defaults"]["mappings"][0]["options"]["5"]  # stall
    overview.write_text(json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    result = _generate("--check", "--dashboards", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout == f"chaosd-overview.json: {panel['title']!r}\n"
    assert _generate("--dashboards", str(tmp_path)).returncode == 0
    assert [p.read_bytes() for p in sorted(tmp_path.glob("*.json"))] == [p.read_bytes() for p in DASHBOARDS]


def test_a_state_the_generator_has_no_style_for_stops_it() -> None:
    generator = _generator_module()
    states = sorted(_detector_states())
    table = generator.codes(states)
    assert sorted(state for _, state, _ in table) == states
    assert len({code for code, _, _ in table}) == len(states) and 0 not in {code for code, _, _ in table}
    with pytest.raises(generator.MissingStyle, match="meltdown"):
        generator.codes([*states, "meltdown"])
    # What the script does with it: exit 2, nothing written (the shipped dashboards would otherwise change).
    generator.detector_states = lambda: [*states, "meltdown"]
    assert generator.main(["--dashboards", str(DASHBOARD_DIR)]) == 2
    assert _generate("--check").returncode == 0
