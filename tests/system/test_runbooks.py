"""Every alert of config/prometheus/rules.yml has a summary, a description and a runbook_url that lands on its own
section of docs/runbooks.md (the anchor GitHub gives the heading), on the one repository base scripts/runbook_urls.py
keeps; every section says what the alert means, how to confirm it and what to do, and its PromQL parses (promtool)
and names only documented metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from needs import program

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus" / "rules.yml"
RULES_TEST = "config/prometheus/rules_test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
METRICS_DOC = ROOT / "docs" / "metrics.md"
SCRIPT = ROOT / "scripts" / "runbook_urls.py"
PAGE = "/blob/main/docs/runbooks.md"
PARTS = ("**What it means.**", "**Confirm", "**What to do.**")
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case; everything but letters, digits, spaces, '-' and '_' dropped
    (inline code's backticks and emphasis marks with it); each space a '-'."""
    text = heading.strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def anchors(markdown: str) -> dict[str, str]:
    """Anchor → heading text for every heading outside fenced code; a repeated slug gets -1, -2 … as on GitHub."""
    found: dict[str, str] = {}
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced and (m := _HEADING.match(line)):
            slug = github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found[slug if n == 0 else f"{slug}-{n}"] = m.group(2)
    return found


def sections(markdown: str) -> dict[str, str]:
    """Each `## ` section's heading → its text, up to the next `## ` heading (fences respected)."""
    out: dict[str, str] = {}
    current: str | None = None
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            current = line[3:].strip()
            out[current] = ""
            continue
        if current is not None:
            out[current] += line + "\n"
    return out


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def annotation_problems(rules: list[dict[str, Any]], markdown: str) -> list[str]:
    """What a user following an alert's annotations would miss: a summary or description, a runbook_url that is not
    absolute, or whose anchor is not the alert's own heading in the runbooks page."""
    headings = anchors(markdown)
    problems = []
    for rule in rules:
        name, notes = rule["alert"], rule.get("annotations", {})
        for key in ("summary", "description"):
            if not str(notes.get(key, "")).strip():
                problems.append(f"{name}: no {key}")
        url = str(notes.get("runbook_url", ""))
        page, _, anchor = url.partition("#")
        if not re.match(r"^https?://[^/\s]+/\S+", page) or not page.endswith(PAGE):
            problems.append(f"{name}: runbook_url {url!r} is not an absolute link to docs/runbooks.md")
        if anchor not in headings:
            problems.append(f"{name}: runbook_url anchor #{anchor} is no heading of docs/runbooks.md")
        elif headings[anchor] != name:
            problems.append(f"{name}: runbook_url anchor #{anchor} is the section of {headings[anchor]!r}")
    return problems


def queries(section: str) -> list[str]:
    """The PromQL of a section's ```promql blocks: one query a line, `#` comment lines and blank lines left out."""
    blocks = re.findall(r"^```promql\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    lines = (line.strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def undocumented(exprs: list[str]) -> set[str]:
    """chaosd's metric names in the queries (label values aside) neither in docs/metrics.md nor recorded by a rule."""
    documented = set(re.findall(r"^\| `(chaosd_\w+)`", METRICS_DOC.read_text(encoding="utf-8"), re.MULTILINE))
    recorded = {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}
    used = {name for expr in exprs for name in re.findall(r"\bchaosd[_:][\w:]*", re.sub(r'"[^"]*"', '""', expr))}
    histogram = re.compile(r"_(bucket|sum|count)$")
    return {n for n in used if n not in documented | recorded and histogram.sub("", n) not in documented}


def _promtool_check(exprs: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    rules = [{"record": f"runbook:q{i:03d}", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp / "runbook_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbooks", "rules": rules}]}), encoding="utf-8")
    return subprocess.run(
        [program("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


# ---------------------------------------------------------------------------------------------- tests


def test_github_slugs() -> None:
    assert github_slug("ChaosdRetryStorm") == "chaosdretrystorm"
    assert github_slug("What to do: `clients.budget`, *now*!") == "what-to-do-clientsbudget-now"
    assert github_slug("Ports & hosts") == "ports--hosts"  # GitHub keeps both hyphens
    assert anchors("# A\n```\n# not a heading\n```\n## A\n### a\n") == {"a": "A", "a-1": "A", "a-2": "a"}


def test_every_alert_has_a_summary_a_description_and_a_runbook_link_to_its_own_section() -> None:
    rules = alerts()
    assert len(rules) >= 17
    assert annotation_problems(rules, RUNBOOKS.read_text(encoding="utf-8")) == []


def test_a_made_up_anchor_or_a_missing_annotation_is_caught() -> None:
    """The negative control: the same check on broken copies of a real alert."""
    markdown = RUNBOOKS.read_text(encoding="utf-8")
    storm = next(r for r in alerts() if r["alert"] == "ChaosdRetryStorm")
    notes = storm["annotations"]
    page = notes["runbook_url"].partition("#")[0]
    made_up = {**storm, "annotations": {**notes, "runbook_url": f"{page}#chaosdnosuchalert"}}
    others = {**storm, "annotations": {**notes, "runbook_url": f"{page}#chaosdstoragedown"}}
    relative = {**storm, "annotations": {**notes, "runbook_url": "docs/runbooks.md#chaosdretrystorm"}}
    bare = {**storm, "annotations": {"runbook_url": notes["runbook_url"]}}
    assert annotation_problems([made_up], markdown) == [
        "ChaosdRetryStorm: runbook_url anchor #chaosdnosuchalert is no heading of docs/runbooks.md"
    ]
    assert annotation_problems([others], markdown) == [
        "ChaosdRetryStorm: runbook_url anchor #chaosdstoragedown is the section of 'ChaosdStorageDown'"
    ]
    assert annotation_problems([relative], markdown) == [
        "ChaosdRetryStorm: runbook_url 'docs/runbooks.md#chaosdretrystorm' is not an absolute link to docs/runbooks.md"
    ]
    assert annotation_problems([bare], markdown) == ["ChaosdRetryStorm: no summary", "ChaosdRetryStorm: no description"]
    # A heading gone from the page: the real alert's link is caught too.
    assert annotation_problems([storm], markdown.replace("## ChaosdRetryStorm\n", "## Retry storms\n")) == [
        "ChaosdRetryStorm: runbook_url anchor #chaosdretrystorm is no heading of docs/runbooks.md"
    ]


def test_every_section_is_an_alerts_and_says_what_it_means_how_to_confirm_and_what_to_do() -> None:
    found = sections(RUNBOOKS.read_text(encoding="utf-8"))
    assert set(found) == {r["alert"] for r in alerts()}, "one section per alert, and none for an alert that is gone"
    missing = [f"{name}: {part}" for name, text in found.items() for part in PARTS if part not in text]
    assert missing == []
    assert [name for name, text in found.items() if not queries(text)] == [], "every section confirms with PromQL"


def test_the_runbook_queries_parse_and_name_only_documented_metrics(tmp_path: Path) -> None:
    exprs = [expr for text in sections(RUNBOOKS.read_text(encoding="utf-8")).values() for expr in queries(text)]
    result = _promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout
    assert undocumented(exprs) == set(), "not in docs/metrics.md nor a recording rule"
    assert undocumented(['rate(chaosd_tasks_totl{job="chaosd_x"}[1m])', "chaosd:queue_saturation:ratio"]) == {
        "chaosd_tasks_totl"
    }
    # The negative control: promtool rejects a broken query, and names it.
    broken = _promtool_check(["up", "sum(rate(chaosd_tasks_total[1m])"], tmp_path)
    assert broken.returncode != 0 and "runbook:q001" in broken.stdout + broken.stderr


def test_every_runbook_link_is_on_one_base_and_a_rebase_keeps_the_rule_tests_passing(tmp_path: Path) -> None:
    assert _script("--check").returncode == 0
    for part in ("pyproject.toml", "config/prometheus/rules.yml", "config/prometheus/rules_test.yml"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, tmp_path / part)
    # A repository declared in pyproject.toml: the shipped links are off it until rebased.
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + '\n[project.urls]\nRepository = "https://git.example.org/team/chaosd"\n'
    )
    off = _script("--check", "--root", str(tmp_path))
    links = sum((ROOT / part).read_text().count("runbook_url:") for part in ("config/prometheus/rules.yml", RULES_TEST))
    assert off.returncode == 1 and off.stdout.count("\n") == links, off.stdout
    assert _script("--root", str(tmp_path)).returncode == 0
    assert _script("--check", "--root", str(tmp_path)).returncode == 0
    rebased = yaml.safe_load((tmp_path / "config/prometheus/rules.yml").read_text())["groups"]
    urls = {r["annotations"]["runbook_url"] for g in rebased for r in g["rules"] if "alert" in r}
    assert urls and all(u.startswith(f"https://git.example.org/team/chaosd{PAGE}#") for u in urls), urls
    promtool = program("promtool")
    run = subprocess.run(
        [promtool, "test", "rules", "config/prometheus/rules_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # A URL that carries a password is refused, with nothing written and the password never echoed.
    before = (tmp_path / "config/prometheus/rules.yml").read_text()
    refused = _script("--root", str(tmp_path), "--repository", "https://bot:s3cret@git.example.org/team/chaosd")
    assert refused.returncode == 2 and "--repository" in refused.stderr and "s3cret" not in refused.stderr
    assert (tmp_path / "config/prometheus/rules.yml").read_text() == before
