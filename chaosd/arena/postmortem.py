"""The post-mortem: a run report as one self-contained HTML file (the page's own modules, inlined, and the data).

The file opens from disk with no server and no network, so its script cannot load the modules by URL (a browser
refuses module scripts from ``file:``), and inline modules cannot import one another (they have no URL; data: URLs
in an import map would break their relative imports). So :func:`_inline_modules` puts the modules the entry point
needs into one ``<script type="module">``, dependencies first: the simplest form that keeps them the served files.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from chaosd.arena.assets import static_files
from chaosd.core.errors import ConfigError

if TYPE_CHECKING:
    from chaosd.views import ReportView

__all__ = ["embed_json", "load_report", "render_html", "write_postmortem"]

_ENTRY = "pm_entry.js"
_IMPORT = re.compile(r'import \{[^}]*\} from "\./([\w.]+)";')
_DECLARED = re.compile(r"^(?:export )?(?:async )?(?:function\*?|class|const|let|var) (\w+)", re.MULTILINE)


def _imports(name: str, code: str) -> list[str]:
    """The modules ``code`` imports; an import is on one line and names its module ``./name.js``."""
    found = []
    for line in code.splitlines():
        if line.startswith("import "):
            match = _IMPORT.fullmatch(line)
            if match is None:
                raise ValueError(f"{name}: an import the post-mortem cannot inline: {line}")
            found.append(match[1])
    return found


def _in_order(files: Mapping[str, str], entry: str) -> list[str]:
    """``entry`` and every module it imports, each after the modules it imports."""
    order: list[str] = []
    entered: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in entered:
            raise ValueError(f"{name}: an import cycle")
        entered.add(name)
        for dep in _imports(name, files[name]):
            visit(dep)
        order.append(name)

    visit(entry)
    return order


def _inline_modules() -> str:
    """The modules the post-mortem needs, as one module: each as it is served, less its ``import`` lines and its
    ``export`` keywords, dependencies first.

    Not a bundler: nothing is renamed, wrapped or rewritten, so the rule is that these modules import on single
    lines and no two of them declare the same top-level name (checked here, as they then share one scope).
    """
    files = {name: body.decode("utf-8") for name, body in static_files().items() if name.endswith(".js")}
    lines = []
    owner: dict[str, str] = {}
    for name in _in_order(files, _ENTRY):
        code = files[name]
        for declared in _DECLARED.findall(code):
            if declared in owner:
                raise ValueError(f"{name} and {owner[declared]} both declare {declared}")
            owner[declared] = name
        lines.append(f"// --- {name}")
        lines.extend(line.removeprefix("export ") for line in code.splitlines() if not line.startswith("import "))
    code = "\n".join(lines)
    if "</" in code:  # would end the inline <script> early
        raise ValueError("the post-mortem script must not contain '</'")
    return code


def embed_json(data: object) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<`` at all, so neither ``</script>`` nor
    ``<!--`` can end or confuse the block (``\\u003c`` is the same character to ``JSON.parse``)."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(report: Mapping[str, object], title: str) -> str:
    css = static_files()["arena.css"].decode("utf-8")
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
        f'<script type="module">\n{_inline_modules()}\n</script>\n</body>\n</html>\n'
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
