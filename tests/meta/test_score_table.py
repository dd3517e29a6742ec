"""scripts/score_table.py: docs/score.md's score table is made from the runs' own reports, and nothing else moves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "score_table.py"
SCORE_DOC = ROOT / "docs" / "score.md"  # the file that holds the markers: the script's default
BEGIN = b"<!-- score-table:begin -->"
END = b"<!-- score-table:end -->"
DASH = "—"


def score_table(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def split(text: bytes) -> tuple[bytes, bytes, bytes]:
    """Before the begin marker (included), between the markers, from the end marker (included)."""
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    head, rest = text.split(BEGIN)
    inside, tail = rest.split(END)
    return head + BEGIN, inside, END + tail


def fmt(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def mean_on(faults: list[dict[str, Any]], clock: str) -> float | None:
    times = [f["recovery_s"] for f in faults if f["clock"] == clock and f["recovery_s"] is not None]
    return sum(times) / len(times) if times else None


def test_the_default_file_is_the_one_that_holds_the_markers() -> None:
    done = score_table("--help")
    assert done.returncode == 0, done.stderr
    assert "(docs/score.md)" in done.stdout  # --readme's default, as --help shows it
    split(SCORE_DOC.read_bytes())  # exactly one begin marker and one end marker, in that order
    readme = (ROOT / "README.md").read_bytes()
    assert BEGIN not in readme and END not in readme  # the table moved; --write must not find a second one


def test_write_replaces_only_the_table_with_the_reports_numbers(tmp_path: Path) -> None:
    readme = tmp_path / "score.md"
    shutil.copyfile(SCORE_DOC, readme)
    before = readme.read_bytes()
    out = tmp_path / "reports"

    done = score_table(
        "--only", "baseline,survival", "--duration", "60s", "--readme", str(readme), "--out", str(out), "--write"
    )
    assert done.returncode == 0, done.stderr

    after = readme.read_bytes()
    head, inside, tail = split(after)
    old_head, _, old_tail = split(before)
    assert (head, tail) == (old_head, old_tail)  # the rest of the file is byte-identical

    lines = inside.decode("utf-8").strip("\n").splitlines()
    reports = {name: json.loads((out / f"{name}.json").read_text()) for name in ("baseline", "survival")}
    assert lines[0].startswith("Made on ")
    assert f"with chaosd {reports['baseline']['chaosd_version']} " in lines[0]
    assert lines[1] == ""
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header[0] == "run" and set(lines[3]) <= {"|", "-"}
    table_end = lines.index("", 4)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:table_end]]
    # Then one line per run on what its score is made of, from the same report.
    reasons = lines[table_end + 3 :]
    assert lines[table_end + 1] == "Why each scores what it does:" and len(reasons) == 2
    assert [r[0] for r in rows] == ["baseline", "survival"]
    assert done.stdout.strip() == inside.decode("utf-8").strip()  # what --write wrote is what it printed

    assert reports["survival"]["faults"], "a survival minute should inject faults, or the checks below prove little"
    for cells in rows:
        r = reports[cells[0]]
        s, faults, tasks = r["score"], r["faults"], r["tasks"]
        recovered = sum(f["outcome"] == "recovered" for f in faults)
        expected = {
            "seed": str(r["seed"]),
            "simulated (s)": f"{r['duration_s']:g}",
            "score": fmt(s["total"]),
            "grade": s["grade"] or DASH,
            "availability": fmt(s["availability"]),
            "recovery rate": fmt(s["recovery_rate"]),
            "recovery speed": fmt(s["recovery_speed"]),
            "consistency": fmt(s["consistency"]),
            "faults": str(len(faults)),
            "incidents": str(len(r["incidents"])),
            "recovered (%)": fmt(100 * recovered / len(faults) if faults else None),
            "mean time-to-heal (s)": fmt(mean_on(faults, "heal"), 2),
            "mean time-to-restore (s)": fmt(mean_on(faults, "restore"), 2),
            "lost": str(tasks["lost"]),
            "duplicated": str(tasks["duplicated"]),
        }
        assert dict(zip(header[1:], cells[1:], strict=True)) == expected
        reason = next(line for line in reasons if line.startswith(f"- **{cells[0]}** ({expected['grade']}): "))
        assert f"availability {expected['availability']}" in reason
        assert f"admission {r['throttle']['policy']}" in reason
        if faults:
            assert f"{recovered} of {len(faults)} faults recovered" in reason
        assert r["duration_s"] == 60.0


def test_a_failed_run_exits_non_zero_and_writes_nothing(tmp_path: Path) -> None:
    readme = tmp_path / "score.md"
    shutil.copyfile(SCORE_DOC, readme)
    before = readme.read_bytes()

    done = score_table("--only", "baseline", "--duration", "bogus", "--readme", str(readme), "--write")

    assert done.returncode == 1
    assert "run 'baseline' failed" in done.stderr and "not a duration" in done.stderr
    assert readme.read_bytes() == before
