// @ts-check
// Line charts drawn as SVG paths: one per measure, updated in place (the path's d), with fault bands.
// The viewBox follows the chart's rendered width (one unit = one CSS pixel), so the axis labels keep their
// stylesheet size however wide the chart is drawn; a ResizeObserver redraws the last data on a resize.
import { el, setAttr, setText, svgEl } from "./dom.js";
import { fmtNum } from "./format.js";

/** @typedef {{key: string, label: string, cls?: string}} SeriesSpec */
/** @typedef {{id: string, title: string, series: SeriesSpec[], digits?: number}} ChartSpec */
/** @typedef {{t: number, [key: string]: unknown}} ChartPoint */
/** @typedef {{from: number, to: number, label: string, cls?: string}} Mark */

const CHART_W = 600; // until the chart is laid out
const CHART_H = 150;
const PAD = { left: 50, right: 10, top: 8, bottom: 22 };

/**
 * @param {number} lo
 * @param {number} hi
 * @param {number} a
 * @param {number} b
 * @returns {(v: number) => number}
 */
function scaleFor(lo, hi, a, b) {
  const span = hi - lo || 1;
  return (v) => a + ((v - lo) / span) * (b - a);
}

export class LineChart {
  // series: [{key, label, cls}]; values are read from points[key].
  /**
   * @param {Element} parent
   * @param {ChartSpec} spec
   */
  constructor(parent, { id, title, series, digits = 1 }) {
    this.series = series;
    this.digits = digits;
    this.width = CHART_W;
    /** @type {[ChartPoint[], Mark[]] | null} */
    this.last = null; // [points, marks]: redrawn when the width changes
    this.paths = series.map((s) => svgEl("path", { class: `line ${s.cls || ""}`, "data-series": s.key, d: "" }));
    this.bands = svgEl("g", { class: "bands" });
    this.plot = svgEl("rect", { class: "plot", x: PAD.left, y: PAD.top, width: CHART_W - PAD.left - PAD.right, height: CHART_H - PAD.top - PAD.bottom });
    this.yMax = svgEl("text", { class: "axis", x: PAD.left - 4, y: PAD.top + 10, "text-anchor": "end" });
    this.yMin = svgEl("text", { class: "axis", x: PAD.left - 4, y: CHART_H - PAD.bottom, "text-anchor": "end" });
    this.tMin = svgEl("text", { class: "axis", x: PAD.left, y: CHART_H - 5 });
    this.tMax = svgEl("text", { class: "axis", x: CHART_W - PAD.right, y: CHART_H - 5, "text-anchor": "end" });
    this.svg = svgEl(
      "svg",
      { class: "chart", viewBox: `0 0 ${CHART_W} ${CHART_H}`, role: "img", "aria-label": title, "data-chart": id },
      this.plot,
      this.bands,
      ...this.paths,
      this.yMax,
      this.yMin,
      this.tMin,
      this.tMax,
    );
    const legend = el("ul", { class: "legend" }, ...series.map((s) => el("li", { class: s.cls || "" }, s.label)));
    this.root = el("figure", { class: "chart-box" }, el("figcaption", {}, title), this.svg, legend);
    parent.append(this.root);
    if (typeof ResizeObserver === "function") {
      new ResizeObserver(() => {
        if (this._fit() && this.last) this.update(...this.last);
      }).observe(this.root);
    }
  }

  // Match the viewBox to the rendered width; true when it changed.
  _fit() {
    const shown = Math.round(this.root.clientWidth);
    if (!(shown >= 200) || shown === this.width) return false;
    this.width = shown;
    setAttr(this.svg, "viewBox", `0 0 ${shown} ${CHART_H}`);
    setAttr(this.plot, "width", shown - PAD.left - PAD.right);
    setAttr(this.tMax, "x", shown - PAD.right);
    return true;
  }

  // marks: [{from, to, label, cls}] drawn as bands behind the lines.
  /**
   * @param {ChartPoint[]} points
   * @param {Mark[]} [marks]
   */
  update(points, marks = []) {
    this.last = [points, marks];
    this._fit();
    if (!points.length) {
      for (const path of this.paths) setAttr(path, "d", "");
      this.bands.replaceChildren();
      return;
    }
    const W = this.width;
    const H = CHART_H;
    const t0 = points[0].t;
    const t1 = Math.max(points[points.length - 1].t, t0 + 1);
    let lo = 0;
    let hi = 0;
    for (const p of points) {
      for (const s of this.series) {
        const v = Number(p[s.key]);
        if (!Number.isFinite(v)) continue;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    if (hi === lo) hi = lo + 1;
    const x = scaleFor(t0, t1, PAD.left, W - PAD.right);
    const y = scaleFor(lo, hi, H - PAD.bottom, PAD.top);
    this.series.forEach((s, i) => {
      const parts = [];
      for (const p of points) {
        const v = Number(p[s.key]);
        if (!Number.isFinite(v)) continue;
        parts.push(`${parts.length ? "L" : "M"}${x(p.t).toFixed(1)} ${y(v).toFixed(1)}`);
      }
      setAttr(this.paths[i], "d", parts.join(""));
    });
    setText(this.yMax, fmtNum(hi, this.digits));
    setText(this.yMin, fmtNum(lo, this.digits));
    setText(this.tMin, `${fmtNum(t0, 0)} s`);
    setText(this.tMax, `${fmtNum(t1, 0)} s`);
    this.bands.replaceChildren(
      ...marks
        .filter((m) => m.to >= t0 && m.from <= t1)
        .map((m) => {
          const a = x(Math.max(m.from, t0));
          const b = x(Math.min(m.to, t1));
          return svgEl(
            "rect",
            { class: `band ${m.cls || ""}`, x: a.toFixed(1), y: PAD.top, width: Math.max(2, b - a).toFixed(1), height: H - PAD.top - PAD.bottom },
            svgEl("title", {}, m.label),
          );
        }),
    );
  }
}
