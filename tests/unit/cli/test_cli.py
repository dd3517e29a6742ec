"""``chaosd run`` as users call it: reports, byte-identical reruns, and bad input → exit 2, nothing run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from chaosd.batch.replicate import RunSpec, prepare, seeds_for
from chaosd.cli.main import main
from chaosd.config.settings import Settings, StageConfig, load_settings

ROOT = Path(__file__).resolve().parents[3]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_run_a_shipped_scenario_writes_a_report_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    code, out, _ = _run(["run", "baseline", "--duration", "60", "--report", str(report)], capsys)
    assert code == 0
    data = json.loads(report.read_text())
    assert data["scenario"] == "baseline" and data["clock"] == "virtual"
    assert data["duration_s"] == 60 and data["warmup_s"] == 30  # the scenario's own warm-up
    for key in ("offered", "accepted", "completed", "failed", "rejected", "lost", "duplicated"):
        assert isinstance(data["tasks"][key], int)
    for kind in ("wait", "sojourn"):
        assert set(data["latency"][kind]) >= {"mean", "p50", "p95", "p99"}
    assert set(data["queue"]) >= {"mean_depth", "max_depth"}
    assert data["collapse"]["episodes"] == []
    assert "baseline" in out and "sojourn" in out and str(report) in out


def test_same_seed_gives_identical_report_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [tmp_path / f"{n}.json" for n in ("a", "b", "c")]
    for path, seed in zip(paths, ("7", "7", "8"), strict=True):
        assert _run(["run", "overload", "--seed", seed, "--duration", "100", "--report", str(path)], capsys)[0] == 0
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b
    assert a != c


def test_run_without_scenario_uses_the_config_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('seed = 3\n[load]\nrate = 50.0\narrival = "constant"\n[run]\nduration = 20\n')
    report = tmp_path / "r.json"
    assert _run(["run", "--config", str(config), "--warmup", "2", "--report", str(report)], capsys)[0] == 0
    data = json.loads(report.read_text())
    assert data["seed"] == 3 and data["duration_s"] == 20 and data["warmup_s"] == 2
    assert data["tasks"]["offered"] == pytest.approx(50 * 18, abs=5)


def test_environment_overrides_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[load]\nrate = 50.0\n")
    monkeypatch.setenv("CHAOSD_LOAD__RATE", "20")
    report = tmp_path / "r.json"
    assert _run(["run", "--config", str(config), "--duration", "20", "--report", str(report)], capsys)[0] == 0
    assert json.loads(report.read_text())["load"]["base_rate"] == 20


BAD_CONFIGS = [
    ("[load]\nrate = -5.0\n", "load.rate", "greater than or equal to 0"),
    ("[load]\nrate = 'fast'\n", "load.rate", "valid number"),
    ("[load]\nratee = 5.0\n", "load.ratee", "unknown key"),
    ("[queue]\nwhen_full = 'explode'\n", "queue.when_full", "'block', 'drop' or 'reject'"),
    ("[workers]\ncount = 0\n", "workers.count", "greater than or equal to 1"),
    ("[[stages]]\nname = 'a'\nservice = { distribution = 'uniform' }\n", "stages.a.service", "low and high"),
    ("[[stages]]\nname = 'a'\n[[stages]]\nname = 'a'\n", "stages", "unique"),
    ("[load]\nphases = [{ type = 'ramp', at = 5, rate = 10 }]\n", "load.phases.0", "needs a duration"),
    ("[detector]\nhold = '2 weeks'\n", "detector.hold", "not a duration"),
    ("[load\nrate = 5\n", "", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "field", "problem"), BAD_CONFIGS)
def test_bad_config_names_file_field_and_problem_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, problem: str
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    report = tmp_path / "r.json"
    code, out, err = _run(["run", "--config", str(config), "--duration", "5", "--report", str(report)], capsys)
    assert code == 2
    assert str(config) in err and field in err and problem in err, err
    assert not report.exists() and out == ""


def test_an_unknown_key_from_the_environment_is_named_and_its_value_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOSD_API__LISTENN", "hunter2-not-shown")
    code, out, err = _run(["run", "--duration", "5", "--report", str(tmp_path / "r.json")], capsys)
    assert code == 2 and out == ""
    assert err == "chaosd: error: environment CHAOSD_API__LISTENN: api.listenn: unknown key\n"


BAD_SCENARIOS = [
    ("name: x\n", "duration", "Field required"),
    ("name: x\nduration: 10s\nload: {rate: -1}\n", "load.rate", "greater than or equal to 0"),
    ("name: x\nduration: soon\n", "duration", "not a duration"),
    ("name: x\nduration: 10s\nbogus: 1\n", "bogus", "unknown key"),
    ("name: x\nduration: 10s\nconfig: {queue: {capacity: 0}}\n", "config.queue.capacity", "greater than"),
    ("name: x\nduration: 10s\nactions: [{delay: 1s}]\n", "actions.0.action", "Field required"),
    ("name: [unclosed\n", "", "not valid YAML"),
    ("- just a list\n", "", "a scenario is a mapping"),
]


@pytest.mark.parametrize(("text", "field", "problem"), BAD_SCENARIOS)
def test_malformed_scenario_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, problem: str
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    report = tmp_path / "r.json"
    code, out, err = _run(["run", str(scenario), "--report", str(report)], capsys)
    assert code == 2
    assert str(scenario) in err and field in err and problem in err, err
    assert not report.exists() and out == ""


def test_missing_scenario_and_config_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["run", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "nope.yaml" in err and "file not found" in err
    code, _, err = _run(["run", "--config", str(tmp_path / "nope.toml")], capsys)
    assert code == 2 and "nope.toml" in err and "file not found" in err


BAD_ACTIONS = [
    ("{type: kill_everything}", "actions.0.action.type", "unknown action 'kill_everything'"),
    ("{type: slow_agent, metadata: {factor: 0.5}}", "actions.0.action.metadata.factor", "between 1 and 1000"),
    ("{type: slow_agent, metadata: {speed: 2}}", "actions.0.action.metadata.speed", "unknown parameter"),
    ("{type: pause_agent, metadata: {duration: 2h}}", "actions.0.action.metadata.duration", "must be in (0, 600]"),
]


@pytest.mark.parametrize(("action", "field", "problem"), BAD_ACTIONS)
def test_scenario_with_a_bad_action_is_refused_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str, field: str, problem: str
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: x\nduration: 10s\nactions:\n  - delay: 1s\n    action: {action}\n")
    report = tmp_path / "r.json"
    code, out, err = _run(["run", str(scenario), "--report", str(report)], capsys)
    assert code == 2
    assert field in err and problem in err, err
    assert not report.exists() and out == ""


def test_unknown_expectation_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\nduration: 10s\nexpect: {happiness: 11}\n")
    code, _, err = _run(["run", str(scenario), "--report", str(tmp_path / "r.json")], capsys)
    assert code == 2 and "expect.happiness" in err and "min_grade" in err


def test_failed_expectation_exits_3_with_the_report_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: x\nduration: 30s\nactions:\n  - delay: 5s\n    action: {type: pool_exhaustion, target_id: 100%,"
        " metadata: {duration: 20s}}\nexpect: {min_grade: A+}\n"
    )
    report = tmp_path / "r.json"
    code, out, _ = _run(["run", str(scenario), "--report", str(report)], capsys)
    assert code == 3
    data = json.loads(report.read_text())
    [entry] = data["expectations"]
    # One vocabulary: the names the views declare, and no other.
    assert set(entry) == {"check", "expected", "measured", "passed", "incident", "because"}
    assert entry["check"] == "min_grade" and entry["expected"] == "A+" and not entry["passed"]
    assert f"  expect     FAIL: min_grade A+ (measured {entry['measured']})" in out
    # The summary of the written report reads the same entry.
    code, summary, _ = _run(["report", str(report)], capsys)
    assert code == 0 and f"  expect     FAIL: min_grade A+ (measured {entry['measured']})" in summary


@pytest.mark.parametrize(
    "args",
    [["run", "--seed", "-1"], ["run", "--duration", "x"], ["run", "--warmup", "70", "--duration", "60"]],
)
def test_bad_flags_exit_2(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not os.chdir: later tests' child processes import chaosd from the checkout
    with pytest.raises(SystemExit) as exc:
        code = main(args)
        raise SystemExit(code)
    assert exc.value.code == 2
    assert not (tmp_path / "chaosd-report.json").exists()


def test_shipped_config_documents_every_key_with_its_default() -> None:
    documented = load_settings(ROOT / "config" / "chaosd.toml")
    assert documented == Settings()
    text = (ROOT / "config" / "chaosd.toml").read_text()
    sections = {name: f.annotation for name, f in Settings.model_fields.items() if name != "stages"}
    sections["stages"] = StageConfig
    for section, model in sections.items():
        for key in getattr(model, "model_fields", {}):
            documented_key = f"\n{key} =" in text or f"# {key} =" in text or f"[[{section}.{key}]]" in text
            assert documented_key, f"[{section}] {key} is not documented"


@pytest.mark.parametrize("argv", [["--port", "eighty"], ["--port", "70000"], ["serve", "--port", "-5"]])
def test_a_bad_daemon_port_exits_2_naming_the_option(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("chaosd: error: --port: not a port number") and "0 to 65535" in err, err


def test_a_bad_daemon_host_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--host", "http://127.0.0.1", "--port", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("chaosd: error: --host: not a host name or address")


def test_a_bad_client_port_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["faults", "--port", "eighty"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("chaosd: error: --port: not a port number: 'eighty'"), err


def test_the_daemon_help_names_host_and_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--host HOST" in text and "--port PORT" in text and "overrides api.port and CHAOSD_API__PORT" in text


# --- chaosd report FILE ----------------------------------------------------------------------------------------

GOLDEN = ROOT / "tests" / "golden"
_LONG_DECIMALS = re.compile(r"\d\.\d{4,}")  # the rounding policy (chaosd/core/humanize.py) never prints these


# retry_storm stays in its storm after the spike: the run fails its verdict (exit 3) and still writes its report.
@pytest.mark.parametrize(("scenario", "seed", "code"), [("leader_assassination", "7", 0), ("retry_storm", "42", 3)])
def test_report_prints_the_golden_summary(
    scenario: str,
    seed: str,
    code: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``chaosd report FILE`` on a shipped scenario's report (fixed seed, virtual time: the same bytes every run)
    prints exactly tests/golden/report_<scenario>.txt.

    After an intended change to the summary (or to the run itself), regenerate the golden files with
    ``CHAOSD_REGENERATE_GOLDEN=1 python -m pytest tests/unit/cli/test_cli.py -k golden`` and review their diff; by hand:
    ``python -m chaosd run SCENARIO --seed SEED --report /tmp/r.json --quiet`` then
    ``python -m chaosd report /tmp/r.json > tests/golden/report_SCENARIO.txt``.
    """
    for name in [n for n in os.environ if n.startswith("CHAOSD_") and n != "CHAOSD_REGENERATE_GOLDEN"]:
        monkeypatch.delenv(name)
    report = tmp_path / "r.json"
    assert _run(["run", scenario, "--seed", seed, "--report", str(report), "--quiet"], capsys)[0] == code
    printed, out, err = _run(["report", str(report)], capsys)
    assert (printed, err) == (0, "")
    golden = GOLDEN / f"report_{scenario}.txt"
    if os.environ.get("CHAOSD_REGENERATE_GOLDEN"):
        golden.write_text(out)
    assert out == golden.read_text()
    assert not _LONG_DECIMALS.search(out), _LONG_DECIMALS.findall(out)
    assert "True" not in out and "False" not in out
    assert "what to fix" in out


def test_report_html_writes_the_page_to_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    assert (
        _run(["run", "baseline", "--duration", "20", "--warmup", "2", "--report", str(report), "--quiet"], capsys)[0]
        == 0
    )
    page = tmp_path / "page.html"
    code, out, _ = _run(["report", str(report), "--html", "-o", str(page)], capsys)
    assert (code, out) == (0, f"chaosd: wrote {page}\n")
    assert page.read_text().startswith("<!doctype html>") or "<html" in page.read_text()
    code, out, err = _run(["report", str(report), "--out", str(page)], capsys)
    assert (code, out) == (2, "")
    assert err == "chaosd: error: --out: only with --html (the summary is printed)\n"


def test_report_help_says_it_prints_the_summary_and_writes_html_with_out(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Print the text summary" in text and "-o OUT, --out OUT" in text and "--html" in text


# --- a CLI that helps: names the option or key, and the fix ------------------------------------------------------

SHIPPED_NAMES = (
    "baseline, capacity_loss_storm, cascading_storm, leader_assassination, overload, pressure_storm, retry_storm, "
    "retry_storm_admission, retry_storm_ways_out, saturation"
)


@pytest.mark.parametrize(
    "command",
    [
        ["run", "baselin", "--report", "r.json"],
        ["sweep", "baselin", "--param", "load.rate=100:200:100", "-o", "s.json"],
        ["run", "baselin.yaml", "--report", "r.json"],
    ],
)
def test_an_unknown_scenario_name_suggests_the_closest_and_lists_them(
    command: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(command, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"chaosd: error: {command[1]}: "), err
    assert "did you mean 'baseline'?" in err and f"Scenarios: {SHIPPED_NAMES}" in err, err
    assert list(tmp_path.iterdir()) == []  # no report, no sweep file, no chart


def test_a_name_close_to_none_lists_the_scenarios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["run", "zzz"], capsys)
    assert code == 2
    assert err == (
        "chaosd: error: zzz: no such scenario file or name (in ./scenarios or the shipped ones). "
        f"Scenarios: {SHIPPED_NAMES}\n"
    )


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_the_top_level_help_says_how_to_start_the_daemon_and_lists_commands_scenarios_and_examples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(["--help"], capsys)
    assert text.startswith("usage: chaosd [--config FILE] [--host HOST] [--port PORT]")
    assert re.search(r"--config FILE +TOML config file", text) and "--host HOST" in text and "--port PORT" in text
    assert "`chaosd --config FILE` (or `chaosd serve --config FILE`) starts the daemon" in text
    for command in ("serve", "run", "report", "sweep", "worker", "inject", "faults", "scenario"):
        assert f"\n    {command} " in text, command
    assert "  baseline               Healthy steady state\n" in text
    assert "  overload               Ramps past capacity\n" in text
    assert "examples:\n  chaosd --config config/chaosd.toml" in text


def test_run_help_lists_every_option_the_scenarios_the_order_of_settings_and_examples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(["run", "--help"], capsys)
    assert text.startswith("usage: chaosd run [-h] [--config FILE]")
    for option in (
        "--config FILE",
        "--seed SEED",
        "--duration TIME",
        "--warmup TIME",
        "--report PATH",
        "--realtime",
        "--quiet",
        "--survival",
        "--interval TIME",
        "--actions ACTIONS",
        "--overlap",
        "--replications N",
        "--jobs J",
        "--cluster ADDRESS",
    ):
        assert f"\n  {option} " in text, option
    for name in SHIPPED_NAMES.split(", "):
        assert f"\n  {name} " in text, name
    assert "built-in defaults, --config FILE, the scenario's config: and load:" in text
    assert "durations: 90 (seconds), 250ms, 1.5m, 1m30s, 2h15m" in text
    assert "examples:\n  chaosd run baseline --duration 1m --warmup 10s" in text
    assert "  retry_storm            Metastable failure sustained by the callers themselves\n" in _help(
        ["sweep", "--help"], capsys
    )


@pytest.fixture
def no_chaosd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CHAOSD_… variable from the shell that runs the tests: the config line lists those that are set."""
    for name in [n for n in os.environ if n.startswith("CHAOSD_")]:
        monkeypatch.delenv(name)


def test_a_bad_config_file_beside_a_scenario_is_refused_though_the_scenario_sets_the_same_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[load]\nrate = "fast"\n')  # baseline sets load.rate itself: the file was never checked
    report = tmp_path / "r.json"
    code, out, err = _run(["run", "baseline", "--config", str(config), "--report", str(report)], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"chaosd: error: {config}: load.rate: Input should be a valid number, unable to parse string as a number"
        " (got 'fast')\n"
    )
    assert not report.exists()


@pytest.mark.usefixtures("no_chaosd_env")
def test_a_config_file_beside_a_scenario_applies_under_the_scenario_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mine.toml"
    config.write_text("[load]\nrate = 50.0\n[queue]\ncapacity = 123\n")  # baseline sets load.rate = 200, no queue
    report = tmp_path / "r.json"
    args = ["run", "baseline", "--config", str(config), "--duration", "5s", "--warmup", "1s", "--report", str(report)]
    code, out, _ = _run(args, capsys)
    assert code == 0
    data = json.loads(report.read_text())
    assert data["queue"]["capacity"] == 123  # the file's key, which the scenario leaves alone
    assert data["load"]["base_rate"] == 200  # the scenario's own key wins over the file's
    assert f"\n  config     --duration, --warmup over baseline.yaml (shipped) over {config} over the defaults\n" in out


@pytest.mark.usefixtures("no_chaosd_env")
def test_the_command_line_beats_the_environment_which_beats_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOSD_SEED", "5")
    monkeypatch.setenv("CHAOSD_LOAD__RATE", "50")
    report = tmp_path / "r.json"
    args = ["run", "baseline", "--seed", "7", "--duration", "5s", "--warmup", "1s", "--report", str(report)]
    code, out, _ = _run(args, capsys)
    assert code == 0
    data = json.loads(report.read_text())
    assert data["seed"] == 7 and data["load"]["base_rate"] == 50
    assert (
        "\n  config     --seed, --duration, --warmup over CHAOSD_LOAD__RATE over CHAOSD_SEED over baseline.yaml" in out
    )


@pytest.mark.usefixtures("no_chaosd_env")
def test_every_replication_keeps_its_own_seed_when_the_environment_sets_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHAOSD_SEED", "5")  # it once beat every replication's seed: N copies of one run
    spec = RunSpec("baseline", duration=5.0, warmup=1.0)
    assert prepare(spec).settings.seed == 5
    assert [prepare(spec.with_seed(seed)).settings.seed for seed in seeds_for(5, 3)] == seeds_for(5, 3)


TIMING_ERRORS = [
    (
        ["baseline", "--duration", "30s"],
        "--duration: 30 s leaves nothing to measure after the 30 s warmup (from scenario baseline); give more than 30s"
        " or a shorter --warmup",
    ),
    (
        ["baseline", "--warmup", "6m"],
        "--warmup: 360 s leaves nothing to measure of the 300 s duration (from scenario baseline); give less than 300s"
        " or a longer --duration",
    ),
    (
        ["--warmup", "70", "--duration", "1m"],
        "--warmup: 70 s leaves nothing to measure of the 60 s duration (from --duration); give less than 60s or a"
        " longer --duration",
    ),
    (["baseline", "--duration", "0"], "--duration: must be more than 0 (got 0)"),
]


@pytest.mark.usefixtures("no_chaosd_env")
@pytest.mark.parametrize(("args", "message"), TIMING_ERRORS)
def test_nothing_left_to_measure_blames_the_option_the_user_set(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    code, out, err = _run(["run", *args, "--report", str(report)], capsys)
    assert (code, out, err) == (2, "", f"chaosd: error: {message}\n")
    assert not report.exists()


@pytest.mark.usefixtures("no_chaosd_env")
def test_a_warmup_too_long_in_the_scenario_file_names_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\nduration: 20s\nwarmup: 30s\n")
    report = tmp_path / "r.json"
    code, _, err = _run(["run", str(scenario), "--report", str(report)], capsys)
    assert code == 2 and not report.exists()
    assert err == (
        f"chaosd: error: {scenario}: warmup: 30 s leaves nothing to measure of the 20 s duration (from scenario x);"
        " give less than 20s here or with --warmup, or a longer --duration\n"
    )


@pytest.mark.usefixtures("no_chaosd_env")
def test_a_measured_window_of_one_second_runs_with_a_warning_naming_both_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    code, out, err = _run(["run", "baseline", "--duration", "31s", "--quiet", "--report", str(report)], capsys)
    assert (code, out) == (0, "")
    assert err == (
        "chaosd: warning: --duration 31 s and the 30 s warmup (from scenario baseline) leave only 1 s to measure"
        " (3 % of the run); give a longer --duration or a shorter --warmup\n"
    )
    data = json.loads(report.read_text())
    assert (data["duration_s"], data["warmup_s"]) == (31, 30)
    # A window of a tenth of the run or more is what the user meant: no warning.
    assert _run(["run", "baseline", "--duration", "40s", "--quiet", "--report", str(report)], capsys)[2] == ""


CONFIG_HINTS = [
    ("[laod]\nrate = 5\n", "laod: unknown key; did you mean load?"),
    ("[load]\nrat = 5\n", "load.rat: unknown key; did you mean load.rate?"),
    (
        "[[stages]]\nname = 'search'\n[stages.service]\nmaen = 0.01\n",
        "stages.search.service.maen: unknown key; did you mean stages.search.service.mean?",
    ),
    (
        "[[stages]]\nname = 'search'\n[stages.service]\nmean = -1\n",
        "stages.search.service.mean: Input should be greater than or equal to 0 (got -1)",
    ),
    (
        "[[stages]]\nname = 'plan'\nnext = ['serch']\n[[stages]]\nname = 'search'\n",
        "stages: stage 'plan': next names unknown stage 'serch'; did you mean 'search'?",
    ),
    (
        "[[faults.stop_conditions]]\nmetric = 'availability'\nbelow = 0.5\nfro = 10\n",
        "faults.stop_conditions.0.fro: unknown key; did you mean faults.stop_conditions.0.for?",
    ),
]


@pytest.mark.usefixtures("no_chaosd_env")
@pytest.mark.parametrize(("text", "line"), CONFIG_HINTS)
def test_config_errors_name_stages_by_name_and_suggest_the_key_meant(
    text: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    report = tmp_path / "r.json"
    code, out, err = _run(["run", "--config", str(config), "--report", str(report)], capsys)
    assert (code, out, err) == (2, "", f"chaosd: error: {config}: {line}\n")
    assert not report.exists()


@pytest.mark.usefixtures("no_chaosd_env")
@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("CHAOSD_LOAD__RAT", "5", "load.rat: unknown key; did you mean CHAOSD_LOAD__RATE?"),
        ("CHAOSD_LAOD__RATE", "5", "laod: unknown key; did you mean CHAOSD_LOAD__RATE?"),
        (
            "CHAOSD_LOAD__RATE",
            "fast",
            "load.rate: Input should be a valid number, unable to parse string as a number (got 'fast')",
        ),
    ],
)
def test_an_environment_override_is_named_by_its_variable(
    variable: str,
    value: str,
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(variable, value)
    report = tmp_path / "r.json"
    code, out, err = _run(["run", "baseline", "--report", str(report)], capsys)
    assert (code, out, err) == (2, "", f"chaosd: error: environment {variable}: {line}\n")
    assert not report.exists()


SCENARIO_HINTS = [
    ("durtion: 10s\n", "durtion: unknown key; did you mean duration?"),
    (
        "duration: 10s\nconfig:\n  queue: {when_ful: drop}\n",
        "config.queue.when_ful: unknown key; did you mean config.queue.when_full?",
    ),
    (
        "duration: 10s\nconfig:\n  stages:\n    - {name: search, kind: tool}\n    - {name: answer}\n"
        "actions:\n  - delay: 1s\n    action: {type: tool_timeout, target_id: serch}\n",
        "actions.0.action.target_id: unknown stage 'serch'; did you mean 'search'? (stages: answer, search; or a kind;"
        " or random)",
    ),
]


@pytest.mark.usefixtures("no_chaosd_env")
@pytest.mark.parametrize(("text", "line"), SCENARIO_HINTS)
def test_scenario_errors_suggest_the_key_or_stage_meant(
    text: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: x\n{text}")
    report = tmp_path / "r.json"
    code, out, err = _run(["run", str(scenario), "--report", str(report)], capsys)
    assert (code, out) == (2, "")
    assert f"chaosd: error: {scenario}: {line}\n" in err, err  # among others (duration is missing as well)
    assert not report.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "baseline", "--duraton", "5s"], "unrecognized arguments: --duraton 5s; did you mean --duration?"),
        (["--confg", "x.toml"], "unrecognized arguments: --confg x.toml; did you mean --config?"),
        (["rnu", "baseline"], "did you mean 'run'?"),
        (
            ["run", "--duration", "30s1m"],
            "--duration: not a duration: '30s1m' ('m' after 's': units go largest first; use seconds (90, 0.5) or"
            " numbers with units h, m, s, ms, largest first: 250ms, 1.5m, 1m30s, 2h15m)",
        ),
    ],
)
def test_a_misspelt_option_or_command_or_a_bad_duration_exits_2_with_the_one_meant(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("chaosd: error: ") and err.endswith(f"{message}\n"), err
    assert list(tmp_path.iterdir()) == []
