"""Rebase every alert's runbook_url (config/prometheus/rules.yml, and the annotations rules_test.yml expects) on one
repository URL: `<repository>/blob/main/docs/runbooks.md#<anchor>`, the page as GitHub renders it.

Usage: python scripts/runbook_urls.py [--repository URL] [--check] [--root DIR]

The repository is --repository, else the `Repository` (or `Source`) entry of pyproject.toml's [project.urls], else
the placeholder https://github.invalid/chaosd/chaosd (a reserved domain: it never resolves to anyone's page). Only
the part before each link's `#anchor` changes; the anchors stay as they are (tests/system/test_runbooks.py checks
them against the headings of docs/runbooks.md). --check changes nothing and exits 1 naming each link off the base.
A bad URL exits 2 naming --repository or pyproject.toml, with nothing written.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
FILES = ("config/prometheus/rules.yml", "config/prometheus/rules_test.yml")
PLACEHOLDER = "https://github.invalid/chaosd/chaosd"
PAGE = "blob/main/docs/runbooks.md"
URL_KEYS = ("repository", "source")  # [project.urls] keys, compared in lower case
_LINK = re.compile(r"^(\s*runbook_url:\s*)(\S+?)(#[A-Za-z0-9_-]+)\s*$", re.MULTILINE)


class BadRepository(ValueError):
    """A repository URL no runbook link can be built on; the message names where it came from."""


def repository(root: Path) -> tuple[str, str]:
    """(URL, where it came from): pyproject.toml's [project.urls] entry, else the placeholder."""
    pyproject = root / "pyproject.toml"
    urls = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("urls", {})
    for key, value in urls.items():
        if key.lower() in URL_KEYS:
            return str(value), f"pyproject.toml [project.urls] {key}"
    return PLACEHOLDER, "the placeholder"


def base(url: str, source: str) -> str:
    """The runbook page's URL on that repository."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRepository(f"{source}: {url!r} is not an absolute http(s) URL")
    if parts.username is not None or parts.password is not None:
        # Never echo it: it may hold a token.
        raise BadRepository(f"{source}: a URL with a user or password is refused (it would be written into the rules)")
    if parts.query or parts.fragment:
        raise BadRepository(f"{source}: {url!r} has a query or a fragment; give the repository's own URL")
    return f"{url.rstrip('/')}/{PAGE}"


def rebased(text: str, page: str) -> str:
    return _LINK.sub(lambda m: f"{m.group(1)}{page}{m.group(3)}", text)


def off_base(text: str, page: str) -> list[str]:
    """Each link in text not on the page's URL."""
    return [m.group(2) + m.group(3) for m in _LINK.finditer(text) if m.group(2) != page]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", help="the repository's URL (default: pyproject.toml's, or the placeholder)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a link is off the base")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this script's)")
    args = parser.parse_args(argv)
    url, source = (args.repository, "--repository") if args.repository else repository(args.root)
    try:
        page = base(url, source)
    except BadRepository as exc:
        print(f"runbook_urls: error: {exc}", file=sys.stderr)
        return 2
    texts = {name: (args.root / name).read_text(encoding="utf-8") for name in FILES}
    if not _LINK.search(texts[FILES[0]]):
        print(f"runbook_urls: error: {FILES[0]} has no runbook_url", file=sys.stderr)
        return 2
    if args.check:
        off = [f"{name}: {link}" for name, text in texts.items() for link in off_base(text, page)]
        for line in off:
            print(line)
        if off:
            print(f"runbook_urls: {len(off)} link(s) not on {page}", file=sys.stderr)
        return 1 if off else 0
    for name, text in texts.items():
        new = rebased(text, page)
        if new != text:
            (args.root / name).write_text(new, encoding="utf-8")
            print(f"{name}: runbook links on {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
