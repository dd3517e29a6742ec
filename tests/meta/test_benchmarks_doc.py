"""docs/benchmarks.md is what bench/write_docs.py writes from the bench scripts' output: every bench has a section
with its figures, their date and the command that measured them, and nothing in the file is written by hand."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"


def _writer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("write_docs", ROOT / "bench" / "write_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["write_docs"] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def test_every_bench_script_has_a_measured_section_with_its_date_and_command() -> None:
    writer = _writer()
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_")} - {"write_docs"}
    assert {b.name for b in writer.BENCHES} == scripts
    measured = writer.sections(DOC.read_text(encoding="utf-8"))
    for bench in writer.BENCHES:
        section = measured.get(bench.name)
        assert section is not None, f"docs/benchmarks.md has no section for bench/{bench.name}.py"
        line = re.search(r"^Measured (\d{4}-\d{2}-\d{2}) with `([^`]+)` \(\d+ s wall, commit [0-9a-f]+", section, re.M)
        assert line is not None, section[:300]
        assert line.group(2) == writer.command(bench)
        assert len(section.splitlines()) > 8, f"bench/{bench.name}.py: no figures in its section"


def test_the_file_is_exactly_what_the_script_writes() -> None:
    """A hand edit (a dated note, a figure typed in) makes the file differ from the script's rendering."""
    writer = _writer()
    text = DOC.read_text(encoding="utf-8")
    assert writer.render(writer.sections(text)) == text
    done = subprocess.run(
        [sys.executable, "bench/write_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The negative control: one line typed into the file is caught.
    edited = text.replace("## Scale\n", "## Scale\n\nFaster than last week.\n", 1)
    assert edited != text and writer.tampered(edited) == ["scale"] and writer.tampered(text) == []
