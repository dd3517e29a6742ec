"""The Arena's JavaScript type-checks: every script under ``// @ts-check``, and tsc (checkJs, strict) finds nothing.

tsc is the ``typescript`` of ``package.json``, installed by ``npm ci`` in the test command (README, ``.ci/run``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import ROOT
from needs import missing

STATIC = ROOT / "chaosd" / "arena" / "static"


def _tsc() -> Path:
    tsc = ROOT / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():
        missing("the TypeScript compiler (node_modules/.bin/tsc)", "npm ci")
    return tsc


def test_every_arena_script_asks_to_be_checked_and_strictly() -> None:
    scripts = sorted(STATIC.glob("*.js"))
    assert len(scripts) > 10
    assert [p.name for p in scripts if not p.read_text(encoding="utf-8").startswith("// @ts-check\n")] == []
    options = json.loads((STATIC / "tsconfig.json").read_text(encoding="utf-8"))["compilerOptions"]
    assert options["checkJs"] and options["noEmit"] and options["strict"]


def test_the_arena_scripts_type_check() -> None:
    done = subprocess.run(
        [str(_tsc()), "--noEmit", "--pretty", "false", "-p", str(STATIC)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_type_error_fails_the_check(tmp_path: Path) -> None:
    # Negative control: the same scripts and config, one of them given a wrong type, must not pass.
    copy = tmp_path / "static"
    copy.mkdir()
    for path in STATIC.iterdir():
        if path.is_file():
            (copy / path.name).write_bytes(path.read_bytes())
    broken = copy / "format.js"
    broken.write_text(broken.read_text(encoding="utf-8") + "\n/** @type {number} */\nexport const wrong = 'text';\n")
    done = subprocess.run(
        [str(_tsc()), "--noEmit", "--pretty", "false", "-p", str(copy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0 and "format.js" in done.stdout, done.stdout + done.stderr
