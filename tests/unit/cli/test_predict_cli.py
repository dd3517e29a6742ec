"""``chaosd predict`` as users call it: on a TOML file, on a scenario whose ``config:`` sets the callers, as text and as
JSON; bad input exits 2 naming the field, and nothing else is printed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chaosd.cli.exits import EXIT_OK, EXIT_USAGE
from chaosd.cli.main import main

# 4 workers at 10 ms a task: 400/s. Callers wait 2 s and retry twice: 3 attempts, a threshold of 133.3/s.
# 150 callers/s with a queue of 25 s: above it, so a storm holds once triggered.
STORM_TOML = """\
[workers]
count = 4
[[stages]]
name = "call"
service = {distribution = "constant", mean = 0.01}
[queue]
capacity = 10000
[load]
rate = 150.0
[clients]
timeout = 2.0
retries = 2
[throttle]
enabled = false
"""

SCENARIO_YAML = """\
name: storm_check
duration: 60s
config:
  workers: {{count: 4}}
  stages:
    - {{name: call, service: {{distribution: constant, mean: 10ms}}}}
  queue: {{capacity: 10000}}
  throttle: {{enabled: false}}
  clients: {{timeout: 2s, retries: 2{extra}}}
load:
  rate: 120
  phases:
    - {{type: spike, at: 10s, rate: 400, duration: 5s}}
"""


@pytest.fixture(autouse=True)
def _no_chaosd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CHAOSD_… variable from the shell that runs the tests: they would sit over the files."""
    for name in [n for n in os.environ if n.startswith("CHAOSD_")]:
        monkeypatch.delenv(name)


def _predict(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["predict", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_toml_config_gets_the_threshold_as_text_and_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "storm.toml"
    config.write_text(STORM_TOML)
    code, out, err = _predict([str(config)], capsys)
    assert code == EXIT_OK and err == ""
    lines = out.splitlines()
    assert lines[0] == f"retry storm prediction for {config}"
    assert "  storm      holds once triggered: the load is above the threshold" in lines
    assert "  threshold  133.3/s (capacity 400.0/s / 3 attempts per caller)" in lines
    assert any(
        line.startswith("  because    3 attempts per caller × 150.0/s = 450.0/s > capacity 400.0/s") for line in lines
    )
    code, out, _ = _predict([str(config), "--json"], capsys)
    view = json.loads(out)
    assert code == EXIT_OK
    assert view["threshold_per_s"] == pytest.approx(400 / 3) and view["capacity_per_s"] == pytest.approx(400)
    assert view["self_sustaining"] is True and view["attempts_per_caller"] == 3


def test_a_scenario_config_section_sets_the_callers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """120/s is below the threshold, its spike to 400/s above it: a storm ends with its trigger, the text says the
    peak passes it. Adding drop_expired to the same scenario rules any storm out (the negative control)."""
    scenario = tmp_path / "storm_check.yaml"
    scenario.write_text(SCENARIO_YAML.format(extra=""))
    code, out, err = _predict([str(scenario), "--json"], capsys)
    view = json.loads(out)
    assert code == EXIT_OK and err == ""
    assert view["load_per_s"] == 120 and view["peak_per_s"] == 400
    assert view["storm_possible"] is True and view["self_sustaining"] is False
    assert view["threshold_per_s"] == pytest.approx(400 / 3)
    code, out, _ = _predict([str(scenario)], capsys)
    assert code == EXIT_OK and f"retry storm prediction for {scenario}" in out
    assert "ends with its trigger" in out and "the load's peak, 400.0/s, is above it" in out
    scenario.write_text(SCENARIO_YAML.format(extra=", drop_expired: true"))
    code, out, _ = _predict([str(scenario), "--json"], capsys)
    dropped = json.loads(out)
    assert code == EXIT_OK and dropped["storm_possible"] is False and dropped["threshold_per_s"] is None
    assert "clients.drop_expired" in dropped["reason"]


def test_a_shipped_scenario_over_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pressure_storm sets its own stages, queue and load but no callers: those come from the file under it."""
    config = tmp_path / "storm.toml"
    config.write_text(STORM_TOML)
    code, out, _ = _predict(["pressure_storm", "--config", str(config)], capsys)
    assert code == EXIT_OK
    assert out.splitlines()[0] == f"retry storm prediction for pressure_storm.yaml (shipped) over {config}"
    assert "the queue holds up to 2.5 s of waiting" in out  # its queue of 1,000 at 400/s, not the file's 10,000
    code, out, _ = _predict(["pressure_storm"], capsys)  # no clients anywhere: callers wait forever
    assert code == EXIT_OK and "no storm can hold: callers wait forever (clients.timeout = 0)" in out


@pytest.mark.parametrize(
    ("where", "text", "named"),
    [
        pytest.param("c.toml", "[clients]\nretries = -1\n", "c.toml: clients.retries: ", id="toml-negative-retries"),
        pytest.param("c.toml", '[clients]\nretry_on = ["slow"]\n', "c.toml: clients.retry_on.0: ", id="toml-retry-on"),
        pytest.param("c.toml", "[clients]\ntimout = 3\n", "did you mean clients.timeout?", id="toml-unknown-key"),
        pytest.param(
            "s.yaml",
            SCENARIO_YAML.format(extra=", budget: {ratio: -0.5}"),
            "s.yaml: config.clients.budget.ratio: ",
            id="scenario-budget",
        ),
    ],
)
def test_a_bad_clients_value_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, text: str, named: str
) -> None:
    path = tmp_path / where
    path.write_text(text)
    code, out, err = _predict([str(path)], capsys)
    assert code == EXIT_USAGE and out == ""
    assert err.startswith("chaosd: error: ") and named in err, err


def test_a_config_file_given_twice_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "storm.toml"
    config.write_text(STORM_TOML)
    code, out, err = _predict([str(config), "--config", str(config)], capsys)
    assert code == EXIT_USAGE and out == "" and err.startswith("chaosd: error: --config: ")


def test_the_help_lists_predict_and_its_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["predict", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
        text = capsys.readouterr().out
        if argv == ["--help"]:
            assert "\n    predict " in text
        else:
            assert text.startswith("usage: chaosd predict [-h] [--config FILE] [--json] [CONFIG_OR_SCENARIO]")
            assert "  retry_storm " in text and "examples:\n  chaosd predict my.toml" in text
