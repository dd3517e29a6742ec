"""Shell completion for bash, zsh and fish, written from chaosd's own argparse parser: ``chaosd completion SHELL``
prints a script to source. It completes the commands, each command's options, and the values an option or an
argument chooses from; where a file is expected, the shell's own file completion."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SHELLS", "add_completion_command", "completion_script"]

SHELLS = ("bash", "zsh", "fish")
_ROOT = "chaosd"


@dataclass(frozen=True)
class _Option:
    flags: tuple[str, ...]
    takes_value: bool
    choices: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class _Command:
    """One command of the tree: its path from the top (``chaosd scenario run``), what it offers next."""

    path: str
    commands: tuple[tuple[str, str], ...]  # its subcommands, each with its help
    options: tuple[_Option, ...]
    choices: tuple[str, ...]  # what its positional arguments choose from


def add_completion_command(top: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``chaosd completion SHELL`` added to the parser's commands; the parser, for chaining."""
    sub = _subcommands(top)
    assert sub is not None, "chaosd's parser has commands"
    command = sub.add_parser(
        "completion",
        help="print a shell completion script to source (bash, zsh, fish)",
        description="Print a completion script for the shell: source <(chaosd completion bash) in ~/.bashrc, "
        "source <(chaosd completion zsh) after compinit in ~/.zshrc, or chaosd completion fish | source.",
    )
    command.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    return top


def completion_script(shell: str, top: argparse.ArgumentParser) -> str:
    """The script for ``shell`` (one of :data:`SHELLS`), completing every command ``top`` has."""
    tree = list(_walk(top, _ROOT))
    if shell == "fish":
        return _fish(tree)
    body = _sh_tables(tree) + (_BASH if shell == "bash" else _ZSH)
    return f"# chaosd completion for {shell}, written by `chaosd completion {shell}`.\n{body}"


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _help(text: str | None) -> str:
    """The help's first clause, as a one-line description (argparse's %-escapes undone)."""
    if not text or text == argparse.SUPPRESS:
        return ""
    text = re.sub(r"%\(\w+\)s", "…", text).replace("%%", "%")
    return re.split(r"[;(]", text, maxsplit=1)[0].strip()


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[_Command]:
    sub = _subcommands(parser)
    helps = {a.dest: _help(a.help) for a in sub._choices_actions} if sub is not None else {}
    named = tuple((name, helps.get(name, "")) for name in (sub.choices if sub is not None else {}))
    options = tuple(
        _Option(tuple(a.option_strings), a.nargs != 0, tuple(str(c) for c in a.choices or ()), _help(a.help))
        for a in parser._actions
        if a.option_strings and a.help != argparse.SUPPRESS
    )
    positional = [a for a in parser._actions if not a.option_strings and a is not sub]
    choices = tuple(str(c) for a in positional for c in a.choices or ())
    yield _Command(path, named, options, choices)
    for name, child in (sub.choices if sub is not None else {}).items():
        yield from _walk(child, f"{path} {name}")


def _case(function: str, rows: dict[str, list[str]]) -> str:
    """A shell function that sets REPLY to the words for its key, and fails for a key it does not know."""
    lines = [f"{function}() {{", '    case "$1" in']
    lines += [f"        {shlex.quote(key)}) REPLY={shlex.quote(' '.join(words))} ;;" for key, words in rows.items()]
    lines += ['        *) REPLY=""; return 1 ;;', "    esac", "}"]
    return "\n".join(lines) + "\n"


def _sh_tables(tree: list[_Command]) -> str:
    commands = {c.path: [name for name, _ in c.commands] for c in tree if c.commands}
    options = {c.path: [flag for o in c.options for flag in o.flags] for c in tree}
    valued = {c.path: [flag for o in c.options if o.takes_value for flag in o.flags] for c in tree}
    choices = {c.path: list(c.choices) for c in tree if c.choices}
    choices |= {f"{c.path}|{flag}": list(o.choices) for c in tree for o in c.options if o.choices for flag in o.flags}
    return "".join(
        (
            _case("_chaosd_commands", commands),
            _case("_chaosd_options", options),
            _case("_chaosd_valued", valued),
            _case("_chaosd_choices", choices),
        )
    )


# The words before the cursor, read left to right: an option that takes a value skips that value; any other word
# that is not an option, where the command has subcommands, names one (an unknown one leads nowhere). Then what
# the cursor's word may be: the option's values, an option, a subcommand, an argument's values, or else a file
# (the shell's own completion).
_WALK_SH = """\
    for ((i = {first}; i < {cursor}; i++)); do
        word="${{{words}[i]}}"
        if [[ -n "$expect" ]]; then expect=""; continue; fi
        if _chaosd_valued "$cmdpath" && [[ " $REPLY " == *" $word "* ]]; then expect="$word"; continue; fi
        if _chaosd_commands "$cmdpath" && [[ "$word" != -* ]]; then cmdpath="$cmdpath $word"; fi
    done
"""

_BASH = (
    """
_chaosd() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cmdpath="chaosd" expect="" word i REPLY
    COMPREPLY=()
"""
    + _WALK_SH.format(first=1, cursor="COMP_CWORD", words="COMP_WORDS")
    + """\
    if [[ -n "$expect" ]]; then
        _chaosd_choices "$cmdpath|$expect" || return 0
    elif [[ "$cur" == -* ]]; then
        _chaosd_options "$cmdpath"
    elif ! _chaosd_commands "$cmdpath" && ! _chaosd_choices "$cmdpath"; then
        return 0
    fi
    COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))
}
complete -o default -F _chaosd chaosd
"""
)

# Sourced after compinit (it uses compdef); `cmdpath`, as zsh ties `path` to PATH.
_ZSH = (
    """
_chaosd() {
    local cur="${words[CURRENT]}" cmdpath="chaosd" expect="" word i REPLY
"""
    + _WALK_SH.format(first=2, cursor="CURRENT", words="words")
    + """\
    if [[ -n "$expect" ]]; then
        _chaosd_choices "$cmdpath|$expect" || { _files; return; }
    elif [[ "$cur" == -* ]]; then
        _chaosd_options "$cmdpath"
    elif ! _chaosd_commands "$cmdpath" && ! _chaosd_choices "$cmdpath"; then
        _files
        return
    fi
    compadd -- ${=REPLY}
}
compdef _chaosd chaosd
"""
)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_switch(function: str, rows: dict[str, list[str]]) -> str:
    """A fish function that prints its key's lines, one a line (a name, a tab, its description)."""
    lines = [f"function {function}", "    switch $argv[1]"]
    for key, words in rows.items():
        lines += [f"        case {_fish_quote(key)}", *(f"            echo {_fish_quote(w)}" for w in words)]
    lines += ["    end", "end"]
    return "\n".join(lines) + "\n"


def _described(name: str, text: str) -> str:
    return f"{name}\t{text}" if text else name


def _fish(tree: list[_Command]) -> str:
    commands = {c.path: [_described(n, h) for n, h in c.commands] for c in tree if c.commands}
    options = {c.path: [_described(f, o.help) for o in c.options for f in o.flags] for c in tree}
    valued = {c.path: [f for o in c.options if o.takes_value for f in o.flags] for c in tree}
    choices = {c.path: list(c.choices) for c in tree if c.choices}
    choices |= {f"{c.path}|{f}": list(o.choices) for c in tree for o in c.options if o.choices for f in o.flags}
    tables = "".join(
        (
            _fish_switch("__chaosd_commands", commands),
            _fish_switch("__chaosd_options", options),
            _fish_switch("__chaosd_valued", valued),
            _fish_switch("__chaosd_choices", choices),
        )
    )
    return "# chaosd completion for fish, written by `chaosd completion fish`.\n" + tables + _FISH


_FISH = """
function __chaosd_complete
    set -l cur (commandline -ct)
    set -l cmdpath chaosd
    set -l expect ''
    for word in (commandline -opc)[2..-1]
        if test -n "$expect"
            set expect ''
        else if contains -- $word (__chaosd_valued $cmdpath)
            set expect $word
        else if not string match -q -- '-*' $word; and count (__chaosd_commands $cmdpath) >/dev/null
            set cmdpath "$cmdpath $word"
        end
    end
    set -l found
    if test -n "$expect"
        set found (__chaosd_choices "$cmdpath|$expect")
    else if string match -q -- '-*' $cur
        set found (__chaosd_options $cmdpath)
    else
        set found (__chaosd_commands $cmdpath)
        set -q found[1]; or set found (__chaosd_choices $cmdpath)
    end
    if set -q found[1]
        printf '%s\\n' $found
    else
        __fish_complete_path $cur
    end
end
complete -c chaosd -f -a '(__chaosd_complete)'
"""
