"""The post-mortem: a run report as one self-contained HTML file (the page's own code, inlined, and the data).

No build step: the page's ES modules are joined in order, their ``import`` lines dropped and ``export``
keywords removed, inside one function scope, so the file opens from disk with no server and no network.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, cast

from chaosd.core.errors import ConfigError

if TYPE_CHECKING:
    from chaosd.views import ReportView

__all__ = ["embed_json", "load_report", "render_html", "write_postmortem"]

# In dependency order; their top-level names must not collide (they share one scope once joined).
_MODULES = ("dom.js", "format.js", "ring.js", "charts.js", "chartdefs.js", "postmortem.js", "pm_entry.js")


def _static(name: str) -> str:
    return (resources.files("chaosd.arena") / "static" / name).read_text(encoding="utf-8")


def _bundle() -> str:
    lines = ['"use strict";']
    for name in _MODULES:
        lines.append(f"// --- {name}")
        for line in _static(name).splitlines():
            if line.startswith("import "):
                continue
            lines.append(line.removeprefix("export "))
    code = "\n".join(lines)
    if "</" in code:  # would end the inline <script> early
        raise ValueError("the post-mortem script must not contain '</'")
    return f"(() => {{\n{code}\n}})();"


def embed_json(data: object) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<`` at all, so neither ``</script>`` nor
    ``<!--`` can end or confuse the block (``\\u003c`` is the same character to ``JSON.parse``)."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(report: Mapping[str, object], title: str) -> str:
    css = _static("arena.css")
    if "</" in css:
        raise ValueError("the stylesheet must not contain '</'")
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n"
        '<link rel="icon" href="data:,">\n'
        f"<style>\n{css}\n</style>\n</head>\n<body>\n"
        '<main class="pm-main"><section id="postmortem" class="panel postmortem"></section></main>\n'
        f'<script type="application/json" id="report-data">{embed_json(report)}</script>\n'
        f"<script>\n{_bundle()}\n</script>\n</body>\n</html>\n"
    )


def load_report(path: Path) -> ReportView:
    """A run report from ``chaosd run`` or the daemon; one clear problem if it is not one.

    It is told from other JSON by its timeline list; a field in another shape fails where it is read
    (``chaosd report`` says the file is not a run report).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([(str(path), "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([(str(path), "", f"cannot be read ({type(exc).__name__})")]) from None
    except json.JSONDecodeError as exc:
        raise ConfigError([(str(path), "", f"not JSON (line {exc.lineno}, column {exc.colno})")]) from None
    if not isinstance(data, dict) or not isinstance(data.get("timeline"), list):
        raise ConfigError([(str(path), "", "not a run report (no timeline list)")])
    return cast("ReportView", data)  # a run report, by its timeline list


def write_postmortem(path: Path, out: Path | None = None) -> Path:
    """Write the post-mortem of the report at ``path`` to ``out`` (default: the same name, ``.html``)."""
    report = load_report(path)
    target = out if out is not None else path.with_suffix(".html")
    title = f"chaosd post-mortem: {report.get('scenario') or path.stem}"
    target.write_text(render_html(report, title), encoding="utf-8")
    return target
