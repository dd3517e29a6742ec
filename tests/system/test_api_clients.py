"""The callers' policy pushed at run time, as users push it: ``GET``/``PUT``/``PATCH /api/v1/clients`` and
``chaosd clients [set KEY=VALUE …]`` against a real daemon on loopback; each push recorded as a ``clients`` event,
bad input refused naming ``clients.<key>`` with nothing changed, and the pushed policy acting on the pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daemon_harness import ROOT, TOKEN, Daemon, wait_for

from chaosd.config.settings import ClientsConfig

DEFAULTS = ClientsConfig().model_dump(mode="json")
PATH = "/api/v1/clients"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    try:
        yield d
    finally:
        d.kill()


def _clients_events(d: Daemon, at_least: int) -> list[dict[str, Any]]:
    """The ``clients`` events the daemon has buffered, oldest first, once there are ``at_least`` of them."""

    async def read() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        timeout = aiohttp.ClientTimeout(total=20)
        params = {"types": "clients", "replay": "1000"}
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(d.base + "/api/v1/events", params=params) as resp,
        ):
            assert resp.status == 200
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    assert line == "event: clients"
                elif line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if len(events) >= at_least:
                        break
        return events

    return asyncio.run(read())


def test_the_policy_is_read_pushed_and_recorded_as_an_event(daemon: Daemon) -> None:
    assert daemon.get(PATH) == (200, DEFAULTS)
    assert DEFAULTS["timeout"] == 0.0 and DEFAULTS["retries"] == 0 and DEFAULTS["budget"] is None

    code, pushed = daemon.request("PATCH", PATH, {"retries": 3, "timeout": 0.5})
    # The keys that changed, in the policy's field order (timeout comes before retries), not as sent.
    assert (code, pushed["changed"]) == (200, ["timeout", "retries"])
    expected = {**DEFAULTS, "timeout": 0.5, "retries": 3}
    assert pushed["clients"] == expected and daemon.get(PATH) == (200, expected)

    # A merge patch: objects merge key by key, a duration may carry its unit, the rest stays as it is.
    code, pushed = daemon.request("PATCH", PATH, {"backoff": {"base": "50ms"}, "budget": {"ratio": 0.1}})
    assert (code, pushed["changed"]) == (200, ["backoff", "budget"])
    backoff = {**DEFAULTS["backoff"], "base": 0.05}
    expected = {**expected, "backoff": backoff, "budget": {"ratio": 0.1}}
    assert daemon.get(PATH) == (200, expected)

    # null restores a key's default: no budget again.
    code, pushed = daemon.request("PATCH", PATH, {"budget": None, "drop_expired": True})
    assert (code, pushed["changed"]) == (200, ["budget", "drop_expired"])
    expected = {**expected, "budget": None, "drop_expired": True}
    assert daemon.get(PATH) == (200, expected)

    # PUT replaces the whole policy: what it leaves out takes its default, as a [clients] table would.
    code, pushed = daemon.request("PUT", PATH, {"retries": 1})
    assert (code, pushed["changed"]) == (200, ["timeout", "retries", "backoff", "drop_expired"])
    assert daemon.get(PATH) == (200, {**DEFAULTS, "retries": 1})

    events = _clients_events(daemon, 4)
    assert [e["changed"] for e in events] == [
        ["timeout", "retries"],
        ["backoff", "budget"],
        ["budget", "drop_expired"],
        ["timeout", "retries", "backoff", "drop_expired"],
    ]
    assert events[0]["clients"] == {**DEFAULTS, "timeout": 0.5, "retries": 3}
    assert events[-1]["clients"] == {**DEFAULTS, "retries": 1}
    assert all(isinstance(e["t"], float) for e in events)


# (body, field named, words of the config's error). The same words `chaosd run` prints for a bad config.
BAD = [
    ({"timeout": -1}, "clients.timeout", "greater than or equal to 0"),
    ({"backoff": {"jitter": 2}}, "clients.backoff.jitter", "less than or equal to 1"),
    ({"retry_on": ["timeout", "crashed"]}, "clients.retry_on.1", "'timeout', 'refused' or 'failed'"),
    ({"retry_on": ["timeout", "timeout"]}, "clients.retry_on", "lists an entry twice"),
    ({"timout": 0.5}, "clients.timout", "unknown key; did you mean clients.timeout?"),
    ({"budget": {"ratio": -0.1}}, "clients.budget.ratio", "greater than or equal to 0"),
    ({"retries": 101}, "clients.retries", "less than or equal to 100"),
    ({"patience": {"distribution": "constant"}}, "clients.patience.mean", "Field required"),
]


def test_bad_input_is_refused_naming_the_key_and_changes_nothing(daemon: Daemon) -> None:
    assert daemon.request("PATCH", PATH, {"retries": 2})[0] == 200
    before = daemon.get(PATH)[1]
    for body, field, words in BAD:
        for method in ("PATCH", "PUT"):
            code, refused = daemon.request(method, PATH, body)
            error = refused["error"]
            assert (code, error["status"], error["field"]) == (400, 400, field), (method, body, refused)
            assert words in error["message"], (method, body, refused)
    # Several problems at once: every one named, the first in `field`.
    code, refused = daemon.request("PATCH", PATH, {"timeout": -1, "retries": -1})
    assert (code, refused["error"]["field"]) == (400, "clients.timeout")
    message = refused["error"]["message"]
    assert message.startswith("Input should be greater than or equal to 0") and "; clients.retries: " in message
    # Not a policy at all: malformed JSON (400), not an object (422 on the body), not JSON (415).
    assert daemon.request("PATCH", PATH, raw=b'{"timeout": ')[0] == 400
    assert daemon.request("PATCH", PATH, [1, 2])[1]["error"]["field"] == "body"
    assert daemon.request("PATCH", PATH, raw=b"{}", headers={"Content-Type": "text/plain"})[0] == 415
    assert daemon.get(PATH) == (200, before)
    # Only the good push is in the event stream (the stream replays every buffered clients event, oldest first);
    # a last good push proves the stream would show a later one.
    assert daemon.request("PATCH", PATH, {"retries": 0})[0] == 200
    assert [e["changed"] for e in _clients_events(daemon, 2)] == [["retries"], ["retries"]]


def test_a_push_without_the_token_or_from_another_origin_is_refused_like_any_change(daemon: Daemon) -> None:
    port = daemon.base.rsplit(":", 1)[1]
    for method in ("PATCH", "PUT"):
        code, refused = daemon.request(method, PATH, {"retries": 5}, token=None)
        assert (code, refused["error"]["field"]) == (401, "Authorization")
        code, refused = daemon.request(method, PATH, {"retries": 5}, token="wrong-token-xx")
        assert (code, refused["error"]["field"]) == (401, "Authorization")
        for headers, field in (
            ({"Origin": "http://evil.example"}, "Origin"),
            ({"Origin": f"http://localhost:{port}"}, "Origin"),
            ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site"),
            ({"Host": "evil.example"}, "Host"),
        ):
            code, refused = daemon.request(method, PATH, {"retries": 5}, headers=headers)
            assert refused["error"]["field"] == field and code in (403, 421), (method, headers, refused)
        # A form, what a page of any site may post without asking.
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert daemon.request(method, PATH, raw=b"retries=5", headers=form)[0] == 415
    assert daemon.get(PATH) == (200, DEFAULTS)
    # The negative control: the same push with the token, from no page, goes through.
    code, pushed = daemon.request("PATCH", PATH, {"retries": 5})
    assert (code, pushed["changed"]) == (200, ["retries"])


def _chaosd(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaosd", "clients", *args, "--addr", d.base, "--token", TOKEN],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=d.env,
        check=False,
    )


def test_the_cli_shows_and_sets_the_policy(daemon: Daemon) -> None:
    shown = _chaosd(daemon)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:3] == ["[clients]", "timeout = 0.0", "retries = 0"]
    assert 'retry_on = ["timeout", "refused"]' in lines and "# budget: not set" in lines

    done = _chaosd(daemon, "set", "timeout=0.5", "retries=3", "drop_expired=true", "budget.ratio=0.1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "changed: timeout, retries, budget, drop_expired"
    expected = {**DEFAULTS, "timeout": 0.5, "retries": 3, "drop_expired": True, "budget": {"ratio": 0.1}}
    assert daemon.get(PATH) == (200, expected)

    # TOML values: an array, an inline table; bare text is a string (a duration with its unit); null: the default.
    done = _chaosd(daemon, "set", 'retry_on=["failed"]', "patience={mean = 2}", "backoff.max=250ms", "budget=null")
    assert done.returncode == 0, done.stderr
    expected = {
        **expected,
        "retry_on": ["failed"],
        "patience": {"distribution": "exponential", "mean": 2.0},
        "backoff": {**DEFAULTS["backoff"], "max": 0.25},
        "budget": None,
    }
    assert daemon.get(PATH) == (200, expected)
    shown = _chaosd(daemon, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == expected

    for args, words in (
        (("timeout=-1",), "clients.timeout: Input should be greater than or equal to 0"),
        (("timout=1",), "clients.timout: unknown key; did you mean clients.timeout?"),
        (
            ("timeout=-1", "retries=-1"),
            "clients.timeout: Input should be greater than or equal to 0 (got -1); clients.retries: ",
        ),
        (("backoff.jitter=2",), "clients.backoff.jitter: "),
        (('retry_on=["crashed"]',), "clients.retry_on.0: "),
        (("retries=3", "retries=4"), "retries given twice"),
        (("retries",), "expected KEY=VALUE"),
        ((), "give at least one KEY=VALUE"),
    ):
        refused = _chaosd(daemon, "set", *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert refused.stderr.startswith("chaosd: error: ") and words in refused.stderr, (args, refused.stderr)
    assert daemon.get(PATH) == (200, expected)  # nothing changed


def test_a_pushed_policy_acts_on_the_running_pipeline(tmp_path: Path) -> None:
    """Callers that wait 5 ms (half the mean service) and retry 3 times, pushed onto a single worker at half its
    capacity: retries begin at once and their load overloads the worker (a storm); with retries pushed back to 0
    they stop."""
    config = tmp_path / "one-worker.toml"
    config.write_text(
        "[load]\nrate = 50.0\nproducers = 1\ndeadline = 0.0\n"
        "[workers]\ncount = 1\n"
        "[queue]\ncapacity = 200\n"
        "[throttle]\nenabled = false\n"
        '[[stages]]\nname = "work"\nkind = "compute"\nservice = { distribution = "exponential", mean = 0.01 }\n'
    )
    d = Daemon(tmp_path, config=config)
    try:

        def attempts() -> tuple[float, float]:
            scraped = d.scrape()
            return scraped['chaosd_attempts_total{kind="first"}'], scraped['chaosd_attempts_total{kind="retry"}']

        def after(callers: int) -> tuple[float, float]:
            """The attempts (first, retry) made once ``callers`` more callers have come."""
            start = attempts()[0]
            wait_for(lambda: attempts()[0] >= start + callers, 30, f"{callers} more callers", lambda: str(attempts()))
            return attempts()

        first0, retry0 = after(100)
        first1, retry1 = after(100)
        assert first1 - first0 >= 100 and retry1 == retry0 == 0  # the defaults: callers that wait forever never retry

        code, pushed = d.request("PATCH", PATH, {"timeout": 0.005, "retries": 3})
        assert (code, pushed["changed"]) == (200, ["timeout", "retries"])
        first2, retry2 = after(5)
        first3, retry3 = after(100)
        retried = (retry3 - retry2) / (first3 - first2)
        assert retried > 1.0, (first2, retry2, first3, retry3)  # most callers retry, many more than once

        code, pushed = d.request("PATCH", PATH, {"retries": 0})
        assert (code, pushed["changed"]) == (200, ["retries"])
        first4, retry4 = after(20)  # retries already drawn when the push came may still go
        first5, retry5 = after(100)
        assert retry5 - retry4 <= 0.05 * (first5 - first4), (first4, retry4, first5, retry5)
    finally:
        d.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root (CI is root)")
def test_a_push_storage_cannot_record_is_answered_503_and_the_policy_is_as_before(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(store)], check=True)
    try:
        d = Daemon(tmp_path, env={"CHAOSD_STORAGE__PATH": str(store / "chaosd.db")})
        try:
            assert d.request("PATCH", PATH, {"retries": 2})[0] == 200  # the negative control: stored, answered
            before = d.get(PATH)[1]
            filler = store / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * 4096)
                with pytest.raises(OSError) as full:
                    os.write(fd, b"\0" * 4096)
                assert full.value.errno == errno.ENOSPC
            finally:
                os.close(fd)
            for method in ("PATCH", "PUT", "PATCH"):  # at once (undone), then once storage is known to fail
                code, refused = d.request(method, PATH, {"retries": 7, "drop_expired": True})
                assert (code, refused["error"]["field"]) == (503, "storage"), refused
                message = refused["error"]["message"]
                assert "so undone" in message or "nothing was changed" in message, message
                assert d.get(PATH) == (200, before)
            filler.unlink()
            wait_for(lambda: d.get("/readyz")[0] == 200, 10, "/readyz once the disk has room")
            code, pushed = d.request("PATCH", PATH, {"retries": 7})
            assert (code, pushed["changed"]) == (200, ["retries"])
        finally:
            d.kill()
    finally:
        if subprocess.run(["umount", str(store)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(store)], check=True)
