"""What users send (a lever's reason, a refused fault's target) reaches terminals, log lines and JSON escaped: ESC
cannot colour the terminal, CR/LF cannot forge a log line, a bidirectional override cannot reverse one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from daemon_harness import TOKEN, Daemon

HOSTILE = "x\x1b[31mRED\r\nchaosd: FORGED line\u202etxt"
RAW = ("\x1b", "\r", "\u202e")


def _cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in daemon.env.items() if not k.startswith("CHAOSD_")}
    return subprocess.run(
        [sys.executable, "-m", "chaosd", *args, "--addr", daemon.base, "--token", TOKEN],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")} if "PYTHONPATH" in os.environ else env,
    )


def test_a_hostile_reason_and_target_are_escaped_in_the_cli_the_log_and_the_api(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        pulled = _cli(daemon, "abort", "--reason", HOSTILE)
        assert pulled.returncode == 0, pulled.stderr
        refused = _cli(daemon, "inject", "kill_agent")  # refused: the lever is pulled, and says why
        assert refused.returncode != 0
        unknown = _cli(daemon, "inject", "pause_agent", "--target", HOSTILE)
        for done in (pulled, refused, unknown):
            printed = done.stdout + done.stderr
            assert not any(c in printed for c in RAW), repr(printed)
            assert "\nchaosd: FORGED" not in printed and not printed.startswith("chaosd: FORGED")
        assert "\\x1b[31mRED\\r\\nchaosd: FORGED line\\u202etxt" in pulled.stdout + refused.stderr
        code, body = daemon.request("POST", "/api/v1/faults", {"action": "kill_agent"})
        assert code >= 400 and not any(c in body["error"]["message"] for c in RAW)
        assert "\\x1b[31mRED" in body["error"]["message"]
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=60)
    daemon.wait_line("report written to")  # the last line: everything before it has been read
    log = "\n".join(daemon.drain())
    assert "FORGED" in log  # the reason was logged (the lever, the refusals, the summary) …
    assert not any(c in log for c in RAW), repr(log[-2000:])  # … and escaped everywhere
    assert not [line for line in log.splitlines() if line.startswith("chaosd: FORGED")]
