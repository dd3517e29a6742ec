"""``chaosd sweep``: the knee and the collapse onset of an M/M/c sweep against Erlang C, with one worker fewer as the
negative control; bad --param values refused before anything runs; ``chaosd report`` on a sweep file and its chart."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from queueing_theory import mmc_sojourn_p95, mmc_sojourn_tail

from chaosd.batch.replicate import RunSpec, run_many, seeds_for
from chaosd.batch.sweep import run as sweep_run
from chaosd.batch.sweep.chart import render_html
from chaosd.batch.sweep.params import MAX_POINTS, parse_params
from chaosd.batch.sweep.run import run_sweep
from chaosd.batch.sweep.view import (
    GOODPUT_FALL,
    SweepParamView,
    SweepPointView,
    SweepView,
    collapse_onsets,
    knees,
    point_view,
    read_sweep,
)
from chaosd.cli.main import main
from chaosd.config.settings import load_settings
from chaosd.core.errors import ConfigError
from chaosd.experiment.runner import run_offline
from chaosd.views import MeanCI, ReportView

MU = 100.0  # per worker: mean service 10 ms
DEADLINE = 0.1  # load.deadline: what the knee holds p95 to (no slo.p95 is set)
STEP = 10.0
POINTS = 5
DURATION = 120.0  # at ρ 0.92 a run this long puts p95 within ~10 % of theory; a step of the rate moves it by ~30 %

# An M/M/c queue: one exponential stage, an unbounded queue, no admission control, no faults. The detector is off:
# the onset here is goodput falling, which theory gives (the detector's own episodes are tested on built points).
MMC_TOML = """
seed = 1
[load]
arrival = "poisson"
rate = 100
producers = 4
deadline = {deadline}
[workers]
count = {workers}
[queue]
capacity = 100000
[[stages]]
name = "work"
service = {{ distribution = "exponential", mean = {mean} }}
[throttle]
policy = "none"
[detector]
enabled = false
[telemetry]
tick = 1.0
"""


def _config(tmp: Path, workers: int) -> Path:
    path = tmp / f"mm{workers}.toml"
    path.write_text(MMC_TOML.format(deadline=DEADLINE, workers=workers, mean=1 / MU), encoding="utf-8")
    return path


def _theory_knee(c: int) -> float:
    """The highest λ with p95 of the sojourn ≤ the deadline (for M/M/c that is also goodput ≥ 95 % of offered)."""
    lo, hi = 1.0, c * MU * (1 - 1e-9)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mmc_sojourn_p95(c, mid, MU) <= DEADLINE else (lo, mid)
    return lo


def _theory_onset(c: int, rates: Sequence[float]) -> float:
    """The lowest rate whose goodput λ·P(T ≤ deadline) falls GOODPUT_FALL below the best at lower rates."""
    best = 0.0
    for lam in rates:
        goodput = lam * (1 - mmc_sojourn_tail(c, lam, MU, DEADLINE)) if lam < c * MU else 0.0
        if goodput < (1 - GOODPUT_FALL) * best:
            return lam
        best = max(best, goodput)
    raise AssertionError("no onset in the range")


def _grid_floor(value: float, start: float) -> float:
    return start + ((value - start) // STEP) * STEP


def _sweep(tmp: Path, workers: int, start: float) -> tuple[Path, SweepView]:
    out = tmp / f"sweep-mm{workers}.json"
    rates = f"{start:g}:{start + (POINTS - 1) * STEP:g}:{STEP:g}"
    argv = ["sweep", "--config", str(_config(tmp, workers)), "--param", f"load.rate={rates}"]
    argv += ["--duration", f"{DURATION:g}", "--jobs", "2", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    return out, json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mm4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SweepView]:
    return _sweep(tmp_path_factory.mktemp("mm4"), 4, 350.0)


@pytest.fixture(scope="module")
def mm3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SweepView]:
    return _sweep(tmp_path_factory.mktemp("mm3"), 3, 250.0)


def _mark(view: SweepView, name: str) -> float:
    mark = view["knee" if name == "knee" else "collapse_onset"][0]
    assert mark["value"] is not None, mark["note"]
    assert isinstance(mark["value"], float)
    return mark["value"]


@pytest.mark.slow
@pytest.mark.cpu
def test_the_knee_and_the_onset_of_an_mmc_sweep_agree_with_erlang_c(
    mm4: tuple[Path, SweepView], mm3: tuple[Path, SweepView]
) -> None:
    measured = {}
    for c, (_, view), start in ((4, mm4, 350.0), (3, mm3, 250.0)):
        rates = [float(v) for v in view["params"][0]["values"]]
        assert rates == [start + k * STEP for k in range(POINTS)]
        assert [p["at"]["load.rate"] for p in view["points"]] == rates
        for p in view["points"]:  # what was offered is what the param set, within Poisson noise
            offered = p["offered_per_s"]["mean"]
            assert offered is not None and abs(offered - p["at"]["load.rate"]) < 0.03 * p["at"]["load.rate"]
        knee, onset = _mark(view, "knee"), _mark(view, "onset")
        theory_knee = _theory_knee(c)
        theory_onset = _theory_onset(c, rates)
        measured[c] = knee
        assert abs(knee - _grid_floor(theory_knee, start)) <= STEP, (c, knee, theory_knee)
        assert abs(onset - theory_onset) <= STEP, (c, onset, theory_onset)
        assert onset > knee  # goodput still grows just past the knee: late tasks are few
    assert _theory_knee(4) == pytest.approx(368.07, abs=0.01)  # queueing.md's sojourn tail, 100 ms deadline
    assert _theory_knee(3) == pytest.approx(268.38, abs=0.01)
    # Negative control: one worker fewer takes a quarter of the capacity, and the knee moves down with it.
    drop = (measured[4] - measured[3]) / measured[4]
    theory_drop = (_theory_knee(4) - _theory_knee(3)) / _theory_knee(4)
    assert theory_drop == pytest.approx(0.271, abs=0.001)
    assert abs(drop - theory_drop) < 0.05, (measured, drop)


@pytest.mark.cpu
def test_report_prints_a_sweep_file_and_writes_its_chart(
    mm4: tuple[Path, SweepView], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, view = mm4
    capsys.readouterr()
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    knee = _mark(view, "knee")
    assert f"knee       load.rate = {knee:g} (the highest load.rate with goodput ≥ 95% of offered" in out
    assert f"onset      load.rate = {_mark(view, 'onset'):g} (goodput fell to" in out
    rows = [line.split() for line in out.splitlines() if line.strip().split(" ")[0].replace(".", "").isdigit()]
    assert [float(r[0]) for r in rows] == [p["at"]["load.rate"] for p in view["points"]]
    page = tmp_path / "chart.html"
    assert main(["report", str(path), "--html", "-o", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == path.with_suffix(".html").read_text(encoding="utf-8")
    svg = _svg_elements(page.read_text(encoding="utf-8"))
    assert [a["data-index"] for tag, a in svg if tag == "circle" and a.get("class") == "point"] == [
        str(i) for i in range(len(view["points"]))
    ]
    knee_lines = [a for tag, a in svg if tag == "line" and a.get("class") == "knee"]
    assert len(knee_lines) == 1
    # The knee's line stands where the knee's point is.
    points = {a["data-index"]: a for tag, a in svg if tag == "circle" and a.get("class") == "point"}
    assert knee_lines[0]["x1"] == points[str(view["knee"][0]["point"])]["cx"]


class _Elements(HTMLParser):
    """Every element inside the <svg>, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.found: list[tuple[str, dict[str, str]]] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self.inside += 1
        elif self.inside:
            self.found.append((tag, {k: v or "" for k, v in attrs}))
        self.scripts += tag == "script"

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.inside -= 1


def _svg_elements(page: str) -> list[tuple[str, dict[str, str]]]:
    parser = _Elements()
    parser.feed(page)
    assert parser.scripts == 0
    return parser.found


# --- Bad input: exit 2, the --param and the problem named, nothing written --------------------------------------


@pytest.mark.parametrize(
    ("param", "named"),
    [
        ("load.rte=100:200:50", "load.rte: not a config key (load has no 'rte'); did you mean load.rate?"),
        ("stages=1", "stages: a list of stages: name one and its key, e.g. stages.answer.service.mean"),
        ("stages.wrk.service.mean=0.01,0.02", "stages.wrk.service.mean: no stage named 'wrk' (the stages: work)"),
        ("stages.work.service.man=0.01,0.02", "did you mean stages.work.service.mean?"),
        ("load.phases=1", "load.phases: a list or a mapping, not a single value"),
        ("load=1", "load: a table, not a value"),
        ("load.rate=100:200:0", "step: must be > 0 (got 0)"),
        ("load.rate=100:200:-5", "step: must be > 0 (got -5)"),
        ("load.rate=300:200:10", "start 300 is above stop 200"),
        ("load.rate=1:1000:1", f"1000 points: at most {MAX_POINTS}"),
        ("load.rate=1:2", "a range is START:STOP:STEP"),
        ("load.rate=a:2:1", "start: not a number ('a')"),
        ("workers.count=1:3:0.5", "1.5 is not a whole number"),
        ("workers.count=0:2:1", "at workers.count=0: workers.count: Input should be greater than or equal to 1"),
        ("load.rate=300,200", "values must be increasing"),
        ("throttle.policy=none,capacity", "the first parameter is the chart's x axis"),
        ("seed=1:3:1", "seed: the seeds come from --seed and --replications"),
        ("load.rate", "expected KEY=START:STOP:STEP"),
    ],
)
def test_bad_params_exit_2_naming_the_param_and_nothing_is_written(
    param: str, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, 2)
    assert main(["sweep", "--config", str(config), "--param", param, "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chaosd: error: --param {param}: "), err
    assert named in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.name]  # no sweep.json, no sweep.html


def test_a_grid_too_large_or_a_param_given_twice_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--config", str(_config(tmp_path, 2)), "--duration", "5"]
    assert main([*argv, "--param", "load.rate=1:100:1", "--param", "workers.count=1:3:1"]) == 2
    assert "100 × 3 = 300 points: at most 200" in capsys.readouterr().err
    assert main([*argv, "--param", "load.rate=1:2:1", "--param", "load.rate=3,4"]) == 2
    assert "load.rate is swept twice" in capsys.readouterr().err
    assert main([*argv, "--param", "load.rate=1:2:1", "--out", "chart.html"]) == 2
    assert "--out: chart.html is where the JSON goes" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mm2.toml"]


def test_ranges_include_their_stop_exactly_and_a_grid_runs_series_by_series() -> None:
    (rate,) = parse_params(["load.rate=0.1:0.3:0.1"])
    assert rate.values == (0.1, 0.2, 0.3)  # in decimals: 0.1 + 2 × 0.1 is 0.3, so the stop is a point
    rate, workers = parse_params(["load.rate=100:200:50", "workers.count=2,4"])
    assert workers.values == (2, 4) and all(type(v) is int for v in workers.values)
    from chaosd.batch.sweep.params import grid, overlay_at  # noqa: PLC0415

    assert grid((rate, workers)) == [(100.0, 2), (150.0, 2), (200.0, 2), (100.0, 4), (150.0, 4), (200.0, 4)]
    assert overlay_at((rate, workers), (150.0, 4)) == {"load": {"rate": 150.0}, "workers": {"count": 4}}
    # A stage's key: the stage list is set whole, so the overlay holds a copy with the one value changed.
    stages: list[dict[str, object]] = [
        {"name": "plan", "service": {"mean": 0.003}},
        {"name": "answer", "service": {"mean": 0.002}, "fallback": None},
    ]
    mean, fallback = parse_params(["stages.answer.service.mean=0.002:0.004:0.001", "stages.answer.fallback.mean=1,2"])
    assert mean.kind == "float" and mean.values == (0.002, 0.003, 0.004)
    overlay = overlay_at((mean, fallback), (0.004, 2.0), stages)
    assert overlay == {
        "stages": [
            {"name": "plan", "service": {"mean": 0.003}},
            {"name": "answer", "service": {"mean": 0.004}, "fallback": {"mean": 2.0}},
        ]
    }
    assert stages[1] == {"name": "answer", "service": {"mean": 0.002}, "fallback": None}  # the run's own, untouched
    with pytest.raises(ConfigError, match="one or two parameters"):
        parse_params(["load.rate=1,2", "workers.count=1,2", "queue.capacity=10,20"])


# --- The knee and the onset rules, on built points -------------------------------------------------------------


def _ci(mean: float | None) -> MeanCI:
    return {"mean": mean, "ci95": None, "n": 1}


def _points(rows: Sequence[tuple[float, float, float, float]]) -> list[SweepPointView]:
    """(rate, goodput per second, p95 s, collapse episodes) → points with a 1 s p95 limit and the 95 % target."""
    points: list[SweepPointView] = []
    for rate, goodput, p95, episodes in rows:
        share = goodput / rate
        points.append(
            {
                "at": {"load.rate": rate},
                "offered_per_s": _ci(rate),
                "goodput_per_s": _ci(goodput),
                "goodput_share": _ci(share),
                "p95_s": _ci(p95),
                "shed_share": _ci(0.0),
                "collapse_episodes": _ci(episodes),
                "score": _ci(90.0),
                "p95_limit_s": 1.0,
                "goodput_target": 0.95,
                "within": share >= 0.95 and p95 <= 1.0,
            }
        )
    return points


PARAMS: list[SweepParamView] = [{"key": "load.rate", "values": [100.0, 200.0, 300.0, 400.0, 500.0]}]


def test_the_knee_is_the_end_of_the_run_of_passing_points_from_the_lowest() -> None:
    points = _points(
        [(100, 100, 0.1, 0), (200, 199, 0.2, 0), (300, 250, 1.5, 0), (400, 390, 0.9, 0), (500, 100, 9.0, 0)]
    )
    (knee,) = knees(PARAMS, points)
    assert (knee["value"], knee["point"]) == (200.0, 1)  # 400 passes again, after 300 failed: not the knee
    assert "the highest load.rate with goodput ≥ 95% of offered and p95 ≤ 1 s" in knee["note"]
    # Negative controls: p95 over the limit alone, or goodput under 95 % alone, fails a point.
    late = _points([(100, 100, 0.1, 0), (200, 199, 1.01, 0)])
    assert knees(PARAMS[:1], late)[0]["value"] == 100.0
    short = _points([(100, 100, 0.1, 0), (200, 189, 0.5, 0)])
    assert knees(PARAMS[:1], short)[0]["value"] == 100.0
    (every,) = knees(PARAMS, _points([(100, 100, 0.1, 0), (200, 200, 0.1, 0)]))
    assert every["value"] == 200.0 and "the knee is here or above" in every["note"]
    (none,) = knees(PARAMS, _points([(100, 50, 0.1, 0), (200, 200, 0.1, 0)]))
    assert none["value"] is None and none["point"] is None and "below the swept range" in none["note"]


def test_the_onset_is_where_goodput_falls_or_the_detector_reports_collapse() -> None:
    plateau = _points([(100, 100, 0.1, 0), (200, 200, 0.1, 0), (300, 196, 0.2, 0), (400, 191, 0.3, 0)])
    (flat,) = collapse_onsets(PARAMS, plateau)
    assert flat["value"] is None  # 191 is 4.5 % under the best 200: a plateau's noise, not a fall
    falling = _points([(100, 100, 0.1, 0), (200, 200, 0.1, 0), (300, 196, 0.2, 0), (400, 189, 0.3, 0)])
    (fell,) = collapse_onsets(PARAMS, falling)
    assert (fell["value"], fell["point"]) == (400.0, 3)
    assert fell["note"] == "goodput fell to 189.0/s from 200.0/s at lower load"
    detected = _points([(100, 100, 0.1, 0), (200, 200, 0.1, 0.5), (300, 100, 2.0, 3)])
    (alarm,) = collapse_onsets(PARAMS, detected)
    assert alarm["value"] == 200.0 and "the detector reported 0.5 collapse episode(s) a run" in alarm["note"]


def test_each_series_of_a_grid_has_its_own_knee_and_onset() -> None:
    params: list[SweepParamView] = [
        {"key": "load.rate", "values": [100.0, 200.0, 300.0]},
        {"key": "workers.count", "values": [2, 4]},
    ]
    points = _points([(100, 100, 0.1, 0), (200, 120, 3.0, 0), (300, 60, 9.0, 0)])
    points += _points([(100, 100, 0.1, 0), (200, 200, 0.2, 0), (300, 299, 0.5, 0)])
    for i, p in enumerate(points):
        p["at"]["workers.count"] = 2 if i < 3 else 4
    two, four = knees(params, points)
    assert (two["series"], two["value"]) == ({"workers.count": 2}, 100.0)
    assert (four["series"], four["value"], four["point"]) == ({"workers.count": 4}, 300.0, 5)
    onsets = collapse_onsets(params, points)
    assert [m["value"] for m in onsets] == [300.0, None]  # 120 → 60: a fall; 4 workers never fall


# --- Replications: a CI per point, the same seeds at every point -------------------------------------------------


@pytest.mark.cpu
def test_replications_give_each_point_a_ci_over_the_same_seeds(tmp_path: Path) -> None:
    spec = RunSpec(config=str(_config(tmp_path, 2)), duration=20.0)
    params = parse_params(["load.rate=100,180"])
    view = run_sweep(spec, params, replications=3, jobs=2)
    assert view["seeds"] == seeds_for(1, 3) and view["replications"] == 3
    for p in view["points"]:
        for name in ("offered_per_s", "goodput_per_s", "p95_s"):
            ci = p[name]
            assert ci["n"] == 3 and ci["ci95"] is not None and ci["mean"] is not None
            lo, hi = ci["ci95"]
            assert lo < ci["mean"] < hi  # three seeds differ: a spread, not a point
    low, high = view["points"]
    assert low["p95_s"]["mean"] is not None and high["p95_s"]["mean"] is not None
    assert high["p95_s"]["mean"] > low["p95_s"]["mean"]  # ρ 0.9 waits longer than ρ 0.5
    # Negative control: one run per point says nothing about the spread.
    single = run_sweep(spec, params, replications=1, jobs=2)
    assert all(p["goodput_per_s"]["ci95"] is None and p["goodput_per_s"]["n"] == 1 for p in single["points"])
    path = tmp_path / "s.json"
    path.write_text(json.dumps(view), encoding="utf-8")
    assert read_sweep(path) == view


@pytest.mark.cpu
def test_admission_control_holds_goodput_past_capacity_so_there_is_no_onset(tmp_path: Path) -> None:
    spec = RunSpec(config=str(_config(tmp_path, 4)), duration=60.0)
    params = parse_params(["load.rate=350,425,500", "throttle.policy=capacity,none"])
    view = run_sweep(spec, params, jobs=2)
    held, off = collapse_onsets(view["params"], view["points"])
    assert held["series"] == {"throttle.policy": "capacity"} and held["value"] is None, held
    capacity = 4 * MU
    shed = []
    for p in view["points"][:3]:
        goodput = p["goodput_per_s"]["mean"]
        assert goodput is not None and goodput >= 0.9 * min(capacity, float(p["at"]["load.rate"])), p
        shed.append(p["shed_share"]["mean"])
    assert shed == sorted(shed) and shed[-1] is not None and shed[-1] > 0.15  # it sheds what it cannot serve
    # Negative control: the same load with admission control off collapses past capacity, and sheds nothing.
    assert (off["series"], off["value"]) == ({"throttle.policy": "none"}, 425.0), off
    assert all(p["shed_share"]["mean"] == 0 for p in view["points"][3:])
    assert view["collapse_onset"] == [held, off]


@pytest.mark.cpu
def test_the_same_sweep_is_the_same_bytes_whatever_the_jobs(tmp_path: Path) -> None:
    config = _config(tmp_path, 2)
    files = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}.json"
        argv = ["sweep", "--config", str(config), "--param", "load.rate=100,150", "--param", "workers.count=2,3"]
        assert main([*argv, "--duration", "10", "--jobs", jobs, "--out", str(out), "--quiet"]) == 0
        files.append((out.read_bytes(), out.with_suffix(".html").read_bytes()))
    assert files[0] == files[1]
    view = json.loads(files[0][0])
    assert [p["at"] for p in view["points"]] == [
        {"load.rate": r, "workers.count": c} for c in (2, 3) for r in (100.0, 150.0)
    ]
    assert len({p["offered_per_s"]["mean"] for p in view["points"]}) == 2  # the same seed at every point: same arrivals
    assert "--jobs" not in view["command"] and "--out" not in view["command"]


@pytest.mark.cpu
def test_the_runs_offering_most_work_start_first_and_the_reports_keep_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep up a rate starts its longest run first (one started last would run alone at the end); the reports
    still come back in the order of the points."""
    rates = (50.0, 200.0, 100.0, 200.0)
    specs = [RunSpec(overlay={"load": {"rate": rate}}, duration=2.0) for rate in rates]
    started: list[int] = []
    reports = run_many(specs, jobs=1, on_done=lambda i, _report: started.append(i), costs=rates)
    assert started == [1, 3, 2, 0]  # one process runs them in the order they were handed over: ties as given
    assert [r["load"]["base_rate"] for r in reports] == list(rates)
    started.clear()
    assert run_many(specs, jobs=1, on_done=lambda i, _report: started.append(i)) == reports  # no costs: as given
    assert started == [0, 1, 2, 3]

    handed: list[list[float] | None] = []

    def spy(specs: Sequence[RunSpec], **kwargs: Any) -> list[ReportView]:
        handed.append(kwargs.get("costs"))
        return run_many(specs, **kwargs)

    monkeypatch.setattr(sweep_run, "run_many", spy)
    view = run_sweep(RunSpec(duration=3.0), parse_params(["load.rate=100,300"]), replications=2, jobs=1)
    assert handed == [[300.0, 300.0, 900.0, 900.0]]  # rate × duration, once per seed
    assert [p["at"] for p in view["points"]] == [{"load.rate": 100.0}, {"load.rate": 300.0}]


def test_the_chart_has_one_point_per_sweep_point_and_escapes_what_it_shows() -> None:
    points = _points([(100, 100, 0.1, 0), (200, 199, 0.2, 0), (300, 150, 3.0, 1)])
    params: list[SweepParamView] = [{"key": "load.rate", "values": [100.0, 200.0, 300.0]}]
    view: SweepView = {
        "sweep": 1,
        "chaosd_version": "0.1.0",
        "command": "chaosd sweep '<script>alert(1)</script>' --param load.rate=100:300:100",
        "scenario": "<script>alert(1)</script>",
        "seed": 1,
        "seeds": [1],
        "replications": 1,
        "duration_s": 60.0,
        "warmup_s": 6.0,
        "params": params,
        "points": points,
        "knee": knees(params, points),
        "collapse_onset": collapse_onsets(params, points),
    }
    page = render_html(view)
    svg = _svg_elements(page)  # no <script> element anywhere
    circles = [a for tag, a in svg if tag == "circle" and a.get("class") == "point"]
    assert len(circles) == 3
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Negative control: one point fewer, one circle fewer.
    fewer = render_html({**view, "points": points[:2], "params": [{"key": "load.rate", "values": [100.0, 200.0]}]})
    assert len([a for tag, a in _svg_elements(fewer) if tag == "circle" and a.get("class") == "point"]) == 2


def test_report_refuses_a_sweep_file_of_another_format_and_still_reads_run_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"sweep": 2, "points": []}', encoding="utf-8")
    assert main(["report", str(other)]) == 2
    assert f"chaosd: error: {other}: sweep: a sweep file of format 1 expected (got 2)" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"sweep": 1, "params": [], "points": {}}', encoding="utf-8")
    assert main(["report", str(broken)]) == 2
    assert "points: missing or not a list: not a sweep file" in capsys.readouterr().err
    # Negative control: JSON without the key is a run report's business (here: not one, said as before).
    plain = tmp_path / "plain.json"
    plain.write_text('{"points": []}', encoding="utf-8")
    assert main(["report", str(plain)]) == 2
    assert "not a run report (no timeline list)" in capsys.readouterr().err


@pytest.mark.cpu
def test_the_good_share_is_of_the_tasks_offered_in_the_window_so_never_above_100_percent() -> None:
    # Tasks offered in the warm-up end inside the window: counted among its completions, they made a fully served
    # point's share read 100.03 % (goodput × window / offered, the control below).
    report = run_offline(load_settings(None, {"seed": 1}), duration=20.0, warmup=5.0)
    t = report["tasks"]
    point = point_view({"load.rate": 200.0}, [report], p95_limit=1.0, goodput_target=0.95)
    share = point["goodput_share"]["mean"]
    assert share == pytest.approx((t["completed"] - t["late"] - t["degraded"]) / t["offered"], abs=1e-6)
    assert 0.99 < share <= 1.0
    window = report["duration_s"] - report["warmup_s"]
    assert report["throughput"]["goodput_per_s"] * window / t["offered"] > 1.0  # the old measure, above 100 %
