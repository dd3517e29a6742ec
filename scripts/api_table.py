"""Regenerate docs/api.md's endpoint table from the route table (chaosd/api/table.py).

Usage: python scripts/api_table.py [--write | --check] [--doc PATH]

Prints the table; --write replaces what lies between the `<!-- api-table:begin … -->` and `<!-- api-table:end -->`
markers of docs/api.md (or of --doc) and nothing else; --check exits 1 when the file's table is not what it writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's chaosd, whatever else is installed

from chaosd.api.table import markdown_table, rewrite_docs  # noqa: E402

DOC = ROOT / "docs" / "api.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table between the markers")
    mode.add_argument("--check", action="store_true", help="exit 1 if the file's table is out of date")
    parser.add_argument("--doc", type=Path, default=DOC, help="the Markdown file holding the markers")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(markdown_table())
        return 0
    text = args.doc.read_text(encoding="utf-8")
    wanted = rewrite_docs(text)
    if args.check:
        if wanted != text:
            print(f"{args.doc}: the endpoint table is out of date; run scripts/api_table.py --write", file=sys.stderr)
            return 1
        return 0
    if wanted != text:
        args.doc.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
