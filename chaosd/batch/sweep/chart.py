"""A sweep as one self-contained HTML page: an SVG chart (goodput and offered load above, p95 on a log scale below,
the knee and the collapse onset marked) and the table of points. Hand-written SVG: no plotting library to import."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path

from chaosd.batch.sweep.view import MarkView, SweepView, Value, series
from chaosd.views import MeanCI

__all__ = ["render_html", "write_html"]

_W, _LEFT, _RIGHT = 860, 78, 24
_TOP_Y, _TOP_H = 56, 270  # goodput and offered
_LOW_Y, _LOW_H = _TOP_Y + _TOP_H + 56, 190  # p95
_H = _LOW_Y + _LOW_H + 48
_PALETTE = ("#1f6feb", "#2da44e", "#bf8700", "#8250df", "#cf222e", "#0a7c86", "#953800", "#57606a")
_OFFERED, _LIMIT, _KNEE, _ONSET = "#8c959f", "#cf222e", "#1a7f37", "#cf222e"


def _f(x: float) -> str:
    return f"{x:.1f}"


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _fmt(v: Value | None) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = span / ticks if span > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


class _Axis:
    """A linear or log10 map from data to pixels over [lo, hi] → [a, b]."""

    def __init__(self, lo: float, hi: float, a: float, b: float, *, log: bool = False) -> None:
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        self.a, self.b = a, b

    def __call__(self, v: float) -> float:
        x = math.log10(v) if self.log else v
        return self.a + (x - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _mean(ci: MeanCI) -> float | None:
    return ci["mean"]


def _x_axis(view: SweepView) -> tuple[_Axis, list[float]]:
    values = [float(v) for v in view["params"][0]["values"] if isinstance(v, int | float)]
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.03
    step = _nice_step(hi - lo)
    ticks = [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    return _Axis(lo - pad, hi + pad, _LEFT, _W - _RIGHT), ticks


def _grid_lines(parts: list[str], x: _Axis, xticks: Sequence[float], top: float, height: float) -> None:
    for t in xticks:
        px = _f(x(t))
        parts.append(f'<line class="grid" x1="{px}" y1="{_f(top)}" x2="{px}" y2="{_f(top + height)}"/>')


def _top_panel(parts: list[str], view: SweepView, x: _Axis, xticks: Sequence[float]) -> None:
    points = view["points"]
    highs = [
        v
        for p in points
        for v in (_mean(p["offered_per_s"]), _mean(p["goodput_per_s"]), *(p["goodput_per_s"]["ci95"] or ()))
        if v is not None
    ]
    top = max([1.0, *highs]) * 1.08
    step = _nice_step(top, 5)
    y = _Axis(0.0, math.ceil(top / step) * step, _TOP_Y + _TOP_H, _TOP_Y)
    _grid_lines(parts, x, xticks, _TOP_Y, _TOP_H)
    for k in range(math.floor(y.hi / step) + 1):
        py = _f(y(k * step))
        parts.append(f'<line class="grid" x1="{_LEFT}" y1="{py}" x2="{_W - _RIGHT}" y2="{py}"/>')
        parts.append(f'<text class="tick" x="{_LEFT - 6}" y="{py}" text-anchor="end" dy="4">{k * step:g}</text>')
    parts.append(
        f'<text class="label" x="18" y="{_f(_TOP_Y + _TOP_H / 2)}" transform="rotate(-90 18 {_f(_TOP_Y + _TOP_H / 2)})"'
        ' text-anchor="middle">tasks per second</text>'
    )
    key = view["params"][0]["key"]
    for s, (at, idx) in enumerate(series(view)):
        colour = _PALETTE[s % len(_PALETTE)]
        label = "".join(f" ({k} = {_fmt(v)})" for k, v in at.items())
        offered = [(x(float(points[i]["at"][key])), _mean(points[i]["offered_per_s"])) for i in idx]
        line = " ".join(f"{_f(px)},{_f(y(v))}" for px, v in offered if v is not None)
        title = f"<title>offered{_text(label)}</title>"
        parts.append(f'<polyline class="offered" points="{line}" stroke="{_OFFERED}">{title}</polyline>')
        good = [(i, x(float(points[i]["at"][key])), _mean(points[i]["goodput_per_s"])) for i in idx]
        line = " ".join(f"{_f(px)},{_f(y(v))}" for _, px, v in good if v is not None)
        title = f"<title>goodput{_text(label)}</title>"
        parts.append(f'<polyline class="goodput" points="{line}" stroke="{colour}">{title}</polyline>')
        for i, px, v in good:
            bounds = points[i]["goodput_per_s"]["ci95"]
            if bounds is not None:  # clamped to the panel: a wide CI near zero goodput reaches below 0
                lo, hi = (min(max(b, y.lo), y.hi) for b in bounds)
                parts.append(
                    f'<line class="ci" x1="{_f(px)}" y1="{_f(y(lo))}" x2="{_f(px)}" y2="{_f(y(hi))}"'
                    f' stroke="{colour}"/>'
                )
            at_point = f"{key} = {_fmt(points[i]['at'][key])}{label}"
            tip = f"{at_point}: goodput {_fmt(v)}/s of {_fmt(_mean(points[i]['offered_per_s']))}/s"
            cy = y(v) if v is not None else y(0.0)
            parts.append(
                f'<circle class="point" data-index="{i}" cx="{_f(px)}" cy="{_f(cy)}" r="3.5" fill="{colour}">'
                f"<title>{_text(tip)}</title></circle>"
            )


def _low_panel(parts: list[str], view: SweepView, x: _Axis, xticks: Sequence[float]) -> None:
    points = view["points"]
    key = view["params"][0]["key"]
    values = [v for p in points for v in (_mean(p["p95_s"]), p["p95_limit_s"]) if v is not None and v > 0]
    lo = 10.0 ** math.floor(math.log10(min(values))) if values else 1e-3
    hi = 10.0 ** math.ceil(math.log10(max(values) * 1.01)) if values else 1.0
    hi = max(hi, lo * 10)
    y = _Axis(lo, hi, _LOW_Y + _LOW_H, _LOW_Y, log=True)
    _grid_lines(parts, x, xticks, _LOW_Y, _LOW_H)
    for k in range(round(math.log10(lo)), round(math.log10(hi)) + 1):
        py = _f(y(10.0**k))
        shown = f"{10.0**k * 1000:g} ms" if k < 0 else f"{10.0**k:g} s"
        parts.append(f'<line class="grid" x1="{_LEFT}" y1="{py}" x2="{_W - _RIGHT}" y2="{py}"/>')
        parts.append(f'<text class="tick" x="{_LEFT - 6}" y="{py}" text-anchor="end" dy="4">{shown}</text>')
    parts.append(
        f'<text class="label" x="18" y="{_f(_LOW_Y + _LOW_H / 2)}" transform="rotate(-90 18 {_f(_LOW_Y + _LOW_H / 2)})"'
        ' text-anchor="middle">p95 sojourn</text>'
    )
    for s, (_at, idx) in enumerate(series(view)):
        colour = _PALETTE[s % len(_PALETTE)]
        limit = " ".join(f"{_f(x(float(points[i]['at'][key])))},{_f(y(points[i]['p95_limit_s']))}" for i in idx)
        if s == 0:
            parts.append(
                f'<polyline class="limit" points="{limit}" stroke="{_LIMIT}"><title>p95 limit</title></polyline>'
            )
        measured = [(i, x(float(points[i]["at"][key])), _mean(points[i]["p95_s"])) for i in idx]
        kept = [(i, px, v) for i, px, v in measured if v is not None and v > 0]
        line = " ".join(f"{_f(px)},{_f(y(v))}" for _, px, v in kept)
        parts.append(f'<polyline class="p95" points="{line}" stroke="{colour}"/>')
        for i, px, v in kept:
            bounds = points[i]["p95_s"]["ci95"]
            if bounds is not None:  # clamped to the log axis: a lower bound at or below zero has no place on it
                lo, hi = (min(max(b, 10.0**y.lo), 10.0**y.hi) for b in bounds)
                parts.append(
                    f'<line class="ci" x1="{_f(px)}" y1="{_f(y(lo))}" x2="{_f(px)}" y2="{_f(y(hi))}"'
                    f' stroke="{colour}"/>'
                )
            tip = f"{key} = {_fmt(points[i]['at'][key])}: p95 {v:.4g} s (limit {points[i]['p95_limit_s']:g} s)"
            parts.append(
                f'<rect class="p95-point" data-index="{i}" x="{_f(px - 3)}" y="{_f(y(v) - 3)}" width="6" height="6"'
                f' fill="{colour}"><title>{_text(tip)}</title></rect>'
            )


def _marks(parts: list[str], view: SweepView, x: _Axis, marks: Sequence[MarkView], kind: str, colour: str) -> None:
    for s, mark in enumerate(marks):
        if mark["value"] is None or not isinstance(mark["value"], int | float):
            continue
        px = _f(x(float(mark["value"])))
        where = "".join(f" ({k} = {_fmt(v)})" for k, v in mark["series"].items())
        text = f"{kind} {_fmt(mark['value'])}{where}"
        dy = 14 + 13 * s + (0 if kind == "knee" else 13 * len(marks))
        parts.append(
            f'<line class="{kind}" x1="{px}" y1="{_TOP_Y}" x2="{px}" y2="{_LOW_Y + _LOW_H}" stroke="{colour}">'
            f"<title>{_text(mark['note'])}</title></line>"
        )
        parts.append(f'<text class="mark" x="{px}" y="{_TOP_Y + dy}" dx="4" fill="{colour}">{_text(text)}</text>')


def render_svg(view: SweepView) -> str:
    x, xticks = _x_axis(view)
    key = view["params"][0]["key"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img"'
        f' aria-label="{_text("goodput, offered load and p95 against " + key)}">'
    ]
    _top_panel(parts, view, x, xticks)
    _low_panel(parts, view, x, xticks)
    for t in xticks:
        parts.append(f'<text class="tick" x="{_f(x(t))}" y="{_LOW_Y + _LOW_H + 16}" text-anchor="middle">{t:g}</text>')
    parts.append(
        f'<text class="label" x="{_f((_LEFT + _W - _RIGHT) / 2)}" y="{_H - 8}" text-anchor="middle">{_text(key)}</text>'
    )
    legend = [
        ("goodput", _PALETTE[0], "goodput"),
        ("offered", _OFFERED, "offered"),
        ("limit", _LIMIT, "p95 limit"),
        ("knee", _KNEE, "knee"),
        ("onset", _ONSET, "collapse onset"),
    ]
    for n, (cls, colour, name) in enumerate(legend):
        lx = _LEFT + 120 * n
        parts.append(f'<line class="{cls} key" x1="{lx}" y1="22" x2="{lx + 24}" y2="22" stroke="{colour}"/>')
        parts.append(f'<text class="tick" x="{lx + 30}" y="26">{name}</text>')
    _marks(parts, view, x, view["knee"], "knee", _KNEE)
    _marks(parts, view, x, view["collapse_onset"], "onset", _ONSET)
    parts.append("</svg>")
    return "\n".join(parts)


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 20px; } code { font-size: 13px; }
svg { max-width: 100%; height: auto; }
.grid { stroke: #eaeef2; } .tick { font-size: 11px; fill: #57606a; } .label { font-size: 12px; fill: #1f2328; }
polyline { fill: none; stroke-width: 2; } .offered { stroke-dasharray: 6 4; } .limit { stroke-dasharray: 3 3; }
.ci { stroke-width: 1.5; } .knee { stroke-dasharray: 8 4; } .onset { stroke-dasharray: 2 3; }
.mark { font-size: 11px; } line.key { stroke-width: 2; }
table { border-collapse: collapse; margin-top: 16px; } td, th { padding: 2px 10px; text-align: right; }
th { border-bottom: 1px solid #d0d7de; } tr.miss td { color: #cf222e; }
"""


def _cell(ci: MeanCI, scale: float = 1.0, digits: int = 1) -> str:
    if ci["mean"] is None:
        return "-"
    text = f"{ci['mean'] * scale:.{digits}f}"
    if ci["ci95"] is not None:
        text += f" ± {(ci['ci95'][1] - ci['ci95'][0]) / 2 * scale:.{digits}f}"
    return text


def render_html(view: SweepView) -> str:
    """The whole page; every value from the file is escaped."""
    keys = [p["key"] for p in view["params"]]
    title = f"chaosd sweep: {view['scenario'] or 'config load'} over {' × '.join(keys)}"
    head = [*keys, "offered /s", "goodput /s", "good share %", "p95 ms", "shed %", "collapses", "score"]
    rows = []
    for p in view["points"]:
        cells = [
            *(_fmt(p["at"][k]) for k in keys),
            _cell(p["offered_per_s"]),
            _cell(p["goodput_per_s"]),
            _cell(p["goodput_share"], 100),
            _cell(p["p95_s"], 1000),
            _cell(p["shed_share"], 100),
            _cell(p["collapse_episodes"], digits=2),
            _cell(p["score"]),
        ]
        klass = "" if p["within"] else ' class="miss"'
        rows.append(f"<tr{klass}>" + "".join(f"<td>{_text(c)}</td>" for c in cells) + "</tr>")
    marks = []
    for kind, marks_of in (("knee", view["knee"]), ("collapse onset", view["collapse_onset"])):
        for m in marks_of:
            where = "".join(f"{k} = {_fmt(v)}: " for k, v in m["series"].items())
            at = "none" if m["value"] is None else f"{keys[0]} = {_fmt(m['value'])}"
            marks.append(f"<li>{_text(kind)}: {_text(where + at)} ({_text(m['note'])})</li>")
    n = view["replications"]
    runs = f"{len(view['points'])} points × {n} run{'s' if n != 1 else ''} (seeds {', '.join(map(str, view['seeds']))})"
    timing = f"{view['duration_s']:g} s each, the first {view['warmup_s']:g} s excluded"
    about = f"{runs} · {timing} · chaosd {view['chaosd_version']}{' · mean ± half the 95 % CI' if n > 1 else ''}"
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_text(title)}</title><style>{_STYLE}</style></head><body>",
            f"<h1>{_text(title)}</h1>",
            f"<p><code>{_text(view['command'])}</code></p>" if view["command"] else "",
            f"<p>{_text(about)}</p>",
            render_svg(view),
            f"<ul>{''.join(marks)}</ul>",
            "<table><thead><tr>" + "".join(f"<th>{_text(h)}</th>" for h in head) + "</tr></thead><tbody>",
            *rows,
            "</tbody></table>",
            "</body></html>",
            "",
        ]
    )


def write_html(view: SweepView, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(view), encoding="utf-8")
    return path
