"""The README's commands, typed as written, against a real daemon with the default config; and the README itself:
at most 300 lines, its links and the docs' links all pointing at files in the repository."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import ROOT, TOKEN, Daemon
from needs import program

from chaosd.cli.exits import EXIT_OK
from chaosd.config.settings import load_settings
from chaosd.experiment.scenario import SHIPPED, load_scenario

README_LINE = "chaosd scenario run leader_assassination --speed 10"


def _client_env(daemon: Daemon) -> dict[str, str]:
    """The daemon's environment less every CHAOSD_ variable: the command gets only the options it is given."""
    return {k: v for k, v in daemon.env.items() if not k.startswith("CHAOSD_")}


@pytest.mark.slow  # tens of seconds of real time
def test_the_readme_scenario_run_passes_on_a_running_daemon(tmp_path: Path) -> None:
    assert README_LINE in (ROOT / "README.md").read_text()
    expect = load_scenario(SHIPPED / "leader_assassination.yaml").expect
    daemon = Daemon(tmp_path)
    try:
        daemon.wait_for_baseline()  # "once a daemon is running": it has a steady state to judge against
        argv = [*README_LINE.split()[1:], "--addr", daemon.base, "--token", TOKEN]
        done = subprocess.run(
            [sys.executable, "-m", "chaosd", *argv],
            check=False,
            cwd=tmp_path,
            env=_client_env(daemon),
            capture_output=True,
            text=True,
            timeout=120,
        )
        status = daemon.get("/api/v1/scenarios/current")[1]
        faults = [
            {k: f.get(k) for k in ("id", "action", "outcome", "recovery_s", "impact_s", "stalled_s", "injected_at")}
            for f in daemon.get("/api/v1/faults")[1]["faults"]
        ]
    finally:
        daemon.kill()
    out = done.stdout.splitlines()
    verdicts = [line for line in out if line.startswith("  expect     ")]
    failed = {e["check"]: e["measured"] for e in status["expectations"] if not e["passed"]}
    checks = [e for e in status["log"] if e["action"] == "verify_leader"]
    kill = next(e for e in status["log"] if e["action"] == "kill_leader")
    assert done.returncode == EXIT_OK, (failed, status.get("score"), faults, done.stdout, done.stderr)
    assert done.stderr == ""
    assert out[0] == "scenario leader_assassination started (speed 10×)"
    assert len(verdicts) == len(expect) and all(line.startswith("  expect     pass: ") for line in verdicts), out
    assert re.fullmatch(r"scenario leader_assassination finished: passed · elapsed .*", out[-1]), out
    assert status["passed"] is True and failed == {}
    # At speed 10 the check comes 0.2 s after the kill, before the dead leader's lease has run out: it
    # waited for the standby, within the failover bound the runtime promises, and found it.
    cfg = load_settings(None).orchestrator
    assert checks and all(c["ok"] and c["leader"] is not None for c in checks)
    assert checks[0]["at"] - kill["at"] < cfg.lease_ttl  # the check came before any standby could take over …
    assert 0 < checks[0]["waited_s"] <= cfg.lease_ttl + cfg.renew_interval + 0.05  # … so it had to wait


# --- The README as a user's document: its length, its links, and its quickstart and tour as written ---------------

MAX_README_LINES = 300
DEFAULT_CONFIG = "config/chaosd.toml"
QUICKSTART_DAEMON = f"python3 -m pip install . && chaosd --config {DEFAULT_CONFIG}"
DOCS = sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_DAEMON_ADDRS = ("localhost:8686", "127.0.0.1:8686")


def _prose(text: str, *, inline_code: bool = False) -> str:
    """The text outside fenced code blocks, and outside inline code spans unless asked: where a link is a link."""
    kept, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line if inline_code else _INLINE_CODE.sub("", line))
    return "\n".join(kept)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, inline code marks dropped, punctuation removed, spaces → '-'."""
    text = heading.strip().lower().replace("`", "")
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(path.read_text(encoding="utf-8"), inline_code=True).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _relative_links(path: Path) -> list[str]:
    targets = _LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, https:, mailto: …


def _section(title: str) -> str:
    """The README's `## title` section, up to the next `## ` heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README.md has no '## {title}' section"
    return m.group(1)


def _sh_commands(section: str) -> list[str]:
    """Every command of the section's ```sh blocks, continuation lines joined; blank and comment lines dropped."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def test_the_readme_is_a_users_document_of_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; reference material goes to docs/"


def test_every_relative_link_in_the_readme_and_docs_points_at_a_file_that_exists() -> None:
    broken = []
    for doc in [ROOT / "README.md", *DOCS]:
        for target in _relative_links(doc):
            name, _, anchor = target.partition("#")
            dest = (doc.parent / name).resolve() if name else doc
            where = f"{doc.relative_to(ROOT)}: ({target})"
            if not dest.is_relative_to(ROOT):
                broken.append(f"{where} points outside the repository")
            elif not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _relative_links(ROOT / "README.md")}
    assert linked, "the link check found no link in README.md: is the pattern right?"
    unlisted = [doc.name for doc in DOCS if doc.resolve() not in linked]
    assert not unlisted, f"docs the README does not point at: {unlisted}"


def test_the_readme_points_at_nothing_outside_the_repository() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../" not in text and "..\\" not in text  # not ../shared, nor any path above the checkout
    absolute = [t for t in _relative_links(ROOT / "README.md") if t.startswith(("/", "~"))]
    assert not absolute, absolute


def test_the_quickstart_is_the_daemon_and_exactly_the_command_ci_runs() -> None:
    commands = _sh_commands(_section("Quickstart"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert commands == [QUICKSTART_DAEMON, ci]  # the second one is run, as written, by .ci/run
    # The first one's install is the wheel test_install.py builds (compiled); its daemon is what the tour below
    # starts.


def _run_as_written(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow  # a real daemon for tens of seconds
def test_every_command_of_the_tour_runs_as_written_against_the_default_daemon(tmp_path: Path) -> None:
    """The tour's commands, in order, typed as written in a shell beside the quickstart's daemon (the default
    config, no token, on loopback). The one thing changed is the port: the daemon listens on a free port rather
    than 8686, so each `localhost:8686` is rewritten to it, and the client commands get it as CHAOSD_ADDR.
    `docker compose up` needs a Docker engine, which the test machine lacks: its compose file is checked with
    `docker-compose config -q` instead. The scenario line is the first test's, against a daemon of its own."""
    commands = _sh_commands(_section("A five-minute tour"))
    assert README_LINE in commands
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "chaosd").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m chaosd "$@"\n')  # this checkout's chaosd
    (shim / "chaosd").chmod(0o755)
    report = tmp_path / "chaosd-report.json"  # the default config's daemon.report, in the tour's directory
    daemon = Daemon(
        tmp_path, env={"CHAOSD_API__TOKEN": None, "CHAOSD_DAEMON__REPORT": str(report)}, config=ROOT / DEFAULT_CONFIG
    )
    ran: list[str] = []
    try:
        host_port = daemon.base.removeprefix("http://")
        env = _client_env(daemon) | {
            "CHAOSD_ADDR": daemon.base,
            "PATH": f"{shim}{os.pathsep}{daemon.env.get('PATH', '')}",
            "PYTHONPATH": daemon.env["PYTHONPATH"],
        }
        for command in commands:
            if command == README_LINE:
                continue
            if command.startswith("export "):
                env = _exported(command, tmp_path, env)  # as the user's shell keeps it for what follows
                ran.append(command)
                continue
            if command.startswith("docker compose up"):
                _check_compose(tmp_path, env)
                ran.append(command)
                continue
            if command.startswith("chaosd report ") and daemon.proc.poll() is None:
                daemon.proc.send_signal(signal.SIGINT)  # "after Ctrl-C": the daemon writes its final report
                assert daemon.proc.wait(timeout=30) == 0, daemon.drain()[-30:]
                assert report.exists(), daemon.drain()[-30:]
            typed = command
            for addr in _DAEMON_ADDRS:
                typed = typed.replace(addr, host_port)
            done = _run_as_written(typed, tmp_path, env)
            assert done.returncode == 0, (command, done.stdout, done.stderr, daemon.drain()[-20:])
            if command.startswith("curl ") and done.stdout.lstrip().startswith("{"):
                answer = json.loads(done.stdout)
                assert "error" not in answer, (command, answer)  # curl -s exits 0 on a 4xx too
            ran.append(command)
    finally:
        if daemon.proc.poll() is None:
            daemon.kill()
    assert any(c.startswith("curl ") and "/api/v1/faults" in c for c in ran), "the tour injects no fault with curl"
    assert any(c.startswith("chaosd inject ") for c in ran), "the tour injects no fault with chaosd inject"
    assert any(c.startswith("chaosd report ") for c in ran), "the tour never turns the report into its page"
    assert (tmp_path / "chaosd-report.html").exists()
    assert "http://127.0.0.1:8686/arena" in _section("A five-minute tour")


def _exported(command: str, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment after ``command`` (an ``export``) ran in a shell with ``env``."""
    done = _run_as_written(f"{command}\nenv -0", cwd, env)
    assert done.returncode == 0, (command, done.stderr)
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)


def _check_compose(cwd: Path, env: dict[str, str]) -> None:
    """The compose file as the standalone Compose v1 reads it (Debian's docker-compose: what this machine has), and
    the README telling users of v1 its own command."""
    compose = program("docker-compose")
    token = cwd / "chaosd-token"
    assert token.exists(), "the tour makes chaosd-token before `docker compose up`"
    assert "`docker-compose up`" in _section("A five-minute tour")
    assert env.get("GRAFANA_ADMIN_PASSWORD"), "the tour sets Grafana's admin password before `docker compose up`"
    done = subprocess.run(
        [compose, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        cwd=ROOT,
        env=env | {"CHAOSD_TOKEN_FILE": str(token)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
