"""The shipped Prometheus rules and the Prometheus and Alertmanager configs, checked by the real tools: promtool
and amtool (Debian packages prometheus, prometheus-alertmanager; `.ci/run` installs them). Nothing here talks to a
running Prometheus. docker-compose.yml: tests/system/test_compose.py.

A missing tool skips its test locally; with CI set in the environment it fails instead.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from needs import program

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus" / "rules.yml"
RULES_TEST = ROOT / "config" / "prometheus" / "rules_test.yml"
METRICS_DOC = ROOT / "docs" / "metrics.md"

ALERTS = {
    "ChaosdPipelineOverloaded",
    "ChaosdPipelineCollapsed",
    "ChaosdPipelineFailing",
    "ChaosdRetryStorm",
    "ChaosdStorageDown",
    "ChaosdQueueGrowingNearCapacity",
    "ChaosdLowResilienceScore",
    "ChaosdSlowRecovery",
    "ChaosdTasksLost",
    "ChaosdDuplicatedEffects",
    "ChaosdDown",
    "ChaosdFileDescriptorsNearLimit",
    "ChaosdRefusingConnections",
    "ChaosdUnplannedIncident",
    "ChaosdScrapeSlow",
    "ChaosdObserverFailing",
    "ChaosdSpansDropped",
}
RECORDS = {
    "chaosd:task_sojourn_seconds:p95",
    "chaosd:task_wait_seconds:p95",
    "chaosd:queue_growth_rate:avg1m",
    "chaosd:queue_saturation:ratio",
    "chaosd:tasks_completed:rate1m",
    "chaosd:tasks_refused:ratio1m",
}


def tool(name: str) -> str:
    return program(name)


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(argv)} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    return proc


def test_promtool_check_rules() -> None:
    out = run(tool("promtool"), "check", "rules", "config/prometheus/rules.yml").stdout
    assert f"SUCCESS: {len(ALERTS) + len(RECORDS)} rules found" in out


def test_promtool_unit_tests() -> None:
    run(tool("promtool"), "test", "rules", "config/prometheus/rules_test.yml")


def test_promtool_check_prometheus_config() -> None:
    # rule_files in prometheus.yml are relative to that file, so this also checks rules.yml.
    out = run(tool("promtool"), "check", "config", "config/prometheus/prometheus.yml").stdout
    assert "1 rule files found" in out


def test_amtool_check_alertmanager_config() -> None:
    run(tool("amtool"), "check-config", "config/alertmanager/alertmanager.yml")


def test_rules_are_the_documented_set_and_every_alert_is_unit_tested() -> None:
    groups = {g["name"]: g["rules"] for g in yaml.safe_load(RULES.read_text())["groups"]}
    assert set(groups) == {"chaosd-recording", "chaosd-alerts"}
    assert {r["record"] for r in groups["chaosd-recording"]} == RECORDS
    alerts = groups["chaosd-alerts"]
    assert {r["alert"] for r in alerts} == ALERTS
    for rule in alerts:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        for key in ("summary", "description"):
            text = rule["annotations"][key]
            assert "{{ $labels.instance }}" in text, (rule["alert"], key)
        assert "$value" in rule["annotations"]["description"], rule["alert"]

    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    cases = [case for t in tests for case in t.get("alert_rule_test", [])]
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    assert fired == ALERTS, "every alert needs a test where it fires"
    assert quiet == ALERTS, "every alert needs a test where it does not fire yet"
    checked = {case["expr"] for t in tests for case in t.get("promql_expr_test", [])}
    assert checked == RECORDS, "every recording rule needs a value check"


def test_rules_use_only_documented_metrics() -> None:
    """promtool cannot know chaosd's metric names: a typo would give an alert that never fires."""
    documented = set(re.findall(r"^\| `(chaosd_\w+)`", METRICS_DOC.read_text(), flags=re.MULTILINE))
    used = set(re.findall(r"\bchaosd_\w+", RULES.read_text()))
    histogram_parts = re.compile(r"_(bucket|sum|count)$")
    undocumented = {m for m in used if m not in documented and histogram_parts.sub("", m) not in documented}
    assert not undocumented, f"metrics not in docs/metrics.md: {sorted(undocumented)}"


def test_the_recovery_buckets_in_the_rule_tests_are_the_exported_edges() -> None:
    """The synthetic recovery histograms rules_test.yml feeds ChaosdSlowRecovery use the daemon's own bucket
    edges, and the alert's threshold is one of them (else histogram_quantile interpolates across it)."""
    from chaosd.exporters.metrics import RECOVERY_BUCKETS  # noqa: PLC0415 - the only test that needs chaosd

    edges = {repr(b) for b in RECOVERY_BUCKETS} | {"+Inf"}
    used = set(re.findall(r'chaosd_fault_recovery_seconds_bucket\{[^}]*\ble="([^"]+)"', RULES_TEST.read_text()))
    assert used and used <= edges, sorted(used - edges)
    alerts = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    slow = next(r for r in alerts if r["alert"] == "ChaosdSlowRecovery")
    threshold = re.search(r">\s*([0-9.]+)\s*$", slow["expr"])
    assert threshold is not None and float(threshold.group(1)) in RECOVERY_BUCKETS
