"""Types that say what they hold: ``Any`` only at the JSON boundary, and a budget that keeps it there.

mypy --strict checks that the types agree; it does not check that they say anything. ``Any`` agrees with
everything, so a field typed ``Any`` (or ``dict[str, Any]``) is one mypy no longer reads. These tests count
the tokens in the package's source with the tokenizer (so comments and strings do not count) and hold
them to the budget: at most 5 per 1,000 lines, ``dict[str, Any]`` only in the modules that parse or
serialise JSON, and no ``Any`` under another name.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "chaosd"
PER_1000_LINES = 5.0
# The modules whose job is JSON in or out and which may hold a parsed document before it is checked, each
# with why: anything else that wants ``dict[str, Any]`` has a view or a TypedDict to use instead.
JSON_BOUNDARY = {
    "config/settings.py": "the merged TOML file and overlay, before pydantic validates them",
    "daemon/storage.py": "a stored JSON column, read back as the view it was written from",
}


def any_tokens(source: str) -> list[int]:
    """The line of every ``Any`` name in ``source``: code only, not comments or strings."""
    lines = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string == "Any":
            lines.append(tok.start[0])
    return lines


def dict_of_any(source: str) -> int:
    """How many ``dict[str, Any]`` (or ``Dict[str, Any]``) annotations ``source`` writes in code."""
    names = [
        t.string
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.NAME or t.string in "[],"
    ]
    text = " ".join(names)
    return text.count("dict [ str , Any ]") + text.count("Dict [ str , Any ]")


def _sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_counters_see_code_and_skip_comments_and_strings() -> None:
    source = (
        "from typing import Any\n"
        "x: dict[str, Any] = {}  # Any in a comment\n"
        "y = 'Any in a string'\n"
        "def f(v: Any) -> Dict[str, Any]: ...\n"
    )
    assert any_tokens(source) == [1, 2, 4, 4]
    assert dict_of_any(source) == 2
    assert any_tokens("x: object = 1  # not Any\n") == []


def test_any_is_within_the_budget() -> None:
    sources = _sources()
    lines = sum(s.count("\n") for s in sources.values())
    per_module = {name: len(any_tokens(s)) for name, s in sources.items()}
    total = sum(per_module.values())
    worst = sorted(((n, m) for m, n in per_module.items() if n), reverse=True)[:5]
    assert total <= PER_1000_LINES * lines / 1000, (
        f"{total} Any in {lines} lines ({1000 * total / lines:.1f} per 1,000, budget {PER_1000_LINES}); most: {worst}"
    )


def test_dict_of_any_only_where_json_is_parsed_or_written() -> None:
    offenders = {name: n for name, s in _sources().items() if (n := dict_of_any(s)) and name not in JSON_BOUNDARY}
    assert offenders == {}, f"dict[str, Any] outside the JSON boundary {sorted(JSON_BOUNDARY)}: {offenders}"


def aliases_of_any(source: str) -> list[int]:
    """Lines that give ``Any`` another name (``Json = Any``, ``Json: TypeAlias = Any``,
    typeshed's ``Incomplete``): such a name would pass the count and still read nothing."""
    found = []
    for node in ast.walk(ast.parse(source)):
        value = getattr(node, "value", None) if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Name) and value.id == "Any":
            found.append(node.lineno)
        if isinstance(value, ast.Attribute) and value.attr == "Any":
            found.append(node.lineno)
        if isinstance(node, ast.alias) and node.name == "Incomplete":
            found.append(node.lineno)
    return sorted(found)


def test_the_alias_finder_finds_aliases() -> None:
    source = "from _typeshed import Incomplete\nJson = Any\nDoc: TypeAlias = typing.Any\nok = object\n"
    assert aliases_of_any(source) == [1, 2, 3]


def test_any_is_not_renamed() -> None:
    offenders = [f"{name}:{line}" for name, s in _sources().items() for line in aliases_of_any(s)]
    assert offenders == []
