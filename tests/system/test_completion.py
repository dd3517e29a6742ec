"""``chaosd completion bash|zsh|fish``: the script, sourced in the real shell, completes chaosd's commands, their
options and the values an argument chooses from. Bash runs its completion function as the TAB key would (the
words and the cursor's index given to it), fish answers ``complete -C``, and zsh is typed into under tmux, TAB
included (the Debian packages zsh, fish and tmux; `.ci/run` installs them)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import ROOT, wait_for
from needs import program

from chaosd.cli.arguments import parser

SHELLS_INSTALL = "apt-get install zsh fish tmux"


def _script(shell: str, tmp_path: Path) -> Path:
    """The script as a user gets it: printed by the command, saved to a file."""
    done = subprocess.run(
        [sys.executable, "-m", "chaosd", "completion", shell],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    path = tmp_path / f"chaosd.{shell}"
    path.write_text(done.stdout)
    return path


def _bash(script: Path, *words: str) -> list[str]:
    """What TAB offers after ``words`` (the last is the word under the cursor, "" for a new one)."""
    body = 'source "$0"; COMP_WORDS=(chaosd "$@"); COMP_CWORD=$#; _chaosd; printf "%s\\n" "${COMPREPLY[@]}"'
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", body, str(script), *words],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_their_options_and_argument_values(tmp_path: Path) -> None:
    script = _script("bash", tmp_path)
    assert _bash(script, "fa") == ["faults"]
    assert sorted(_bash(script, "run", "--rep")) == ["--replications", "--report"]
    assert _bash(script, "scenario", "run", "--sp") == ["--speed"]  # a command of a command
    assert sorted(_bash(script, "scenario", "")) == ["run", "stop"]
    assert _bash(script, "completion", "z") == ["zsh"]  # an argument's choices
    assert _bash(script, "--config", "run", "fa") == ["faults"]  # "run" was --config's value, not a command
    # Controls: an option of another command, a command that does not exist, a word nothing starts with.
    assert _bash(script, "faults", "--rep") == []
    assert _bash(script, "xyz", "") == [] and _bash(script, "xyz", "--") == []
    assert _bash(script, "zz") == []


def test_every_command_of_the_parser_is_offered_at_the_top(tmp_path: Path) -> None:
    top = parser()
    (commands,) = [a for a in top._actions if a.dest == "command"]
    assert commands.choices is not None
    offered = _bash(_script("bash", tmp_path), "")
    assert set(offered) == {*commands.choices, "completion"}
    assert "worker" in offered and "serve" in offered


def test_fish_completes_with_each_commands_help(tmp_path: Path) -> None:
    fish = program("fish", install=SHELLS_INSTALL)
    script = _script("fish", tmp_path)

    def complete(line: str) -> list[str]:
        done = subprocess.run(
            [fish, "--no-config", "-c", f"source {script}; complete -C '{line}'"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout.splitlines()

    assert complete("chaosd fa") == ["faults\tlist the faults of the running daemon"]
    assert [line.split("\t")[0] for line in complete("chaosd run --rep")] == ["--replications", "--report"]
    assert [line.split("\t")[0] for line in complete("chaosd scenario run --sp")] == ["--speed"]
    assert complete("chaosd completion ") == ["bash", "fish", "zsh"]
    (tmp_path / "a-file.yaml").write_text("")
    assert "a-file.yaml" in complete("chaosd run a-")  # a file where the argument is a file
    # Controls. With no candidate that starts with the word, fish shows fuzzy matches: none may start with it.
    assert not [line for line in complete("chaosd faults --rep") if line.startswith("--rep")]
    assert not [line for line in complete("chaosd zz") if line.startswith("zz")]


class _Zsh:
    """An interactive zsh under tmux (a server of its own), with compinit and the script sourced."""

    def __init__(self, tmp_path: Path, script: Path) -> None:
        self.tmux = program("tmux", install=SHELLS_INSTALL)
        zsh = program("zsh", install=SHELLS_INSTALL)
        self.socket = f"chaosd-{uuid.uuid4().hex[:8]}"
        rc = tmp_path / ".zshrc"
        rc.write_text(f"PS1='> '\nautoload -U compinit && compinit -u -d {tmp_path}/.zcompdump\nsource {script}\n")
        env = f"ZDOTDIR={tmp_path} TERM=xterm"
        self._tmux("new-session", "-d", "-x", "200", "-y", "20", f"env {env} {zsh} -i")
        self.typed = 0
        # Keys sent before the first prompt reach no line editor (a TAB would be typed as spaces).
        wait_for(lambda: self._screen()[-1:] == [">"], 20, "zsh's first prompt", lambda: repr(self._screen()))

    def _screen(self) -> list[str]:
        return [row.rstrip() for row in self._tmux("capture-pane", "-p", "-t", "0").splitlines() if row.strip()]

    def _tmux(self, *argv: str) -> str:
        done = subprocess.run(
            [self.tmux, "-L", self.socket, *argv], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def tab(self, line: str) -> str:
        """The command line after typing ``line`` and TAB. A marker typed after TAB shows the TAB was handled."""
        self.typed += 1
        marker = f"#{self.typed}#"
        self._tmux("send-keys", "-t", "0", "C-u", line, "Tab", marker)
        screen: list[str] = []

        def shown() -> bool:
            screen[:] = self._screen()
            return bool(screen) and screen[-1].endswith(marker)

        wait_for(shown, 20, f"zsh showing {marker}", lambda: repr(screen))
        return screen[-1].removeprefix("> ").removesuffix(marker)

    def close(self) -> None:
        self._tmux("kill-server")


@pytest.fixture
def zsh(tmp_path: Path) -> Iterator[_Zsh]:
    shell = _Zsh(tmp_path, _script("zsh", tmp_path))
    try:
        yield shell
    finally:
        shell.close()


def test_zsh_completes_on_tab(zsh: _Zsh) -> None:
    assert zsh.tab("chaosd fa") == "chaosd faults "
    assert zsh.tab("chaosd scenario run --sp") == "chaosd scenario run --speed "
    assert zsh.tab("chaosd completion f") == "chaosd completion fish "
    # Controls: nothing to complete leaves the line as typed.
    assert zsh.tab("chaosd faults --rep") == "chaosd faults --rep"
    assert zsh.tab("chaosd zz") == "chaosd zz"
