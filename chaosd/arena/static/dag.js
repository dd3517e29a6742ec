// @ts-check
// The DAG, left to right: stages by depth, the current route, removed stages and edges, open breakers,
// each stage's attempt rate, p95 and error share over the telemetry window, its attempts per caller, and the active
// faults written on what they hit. Everything ever seen keeps its place, removed or not.
import { setAttr, setText, svgEl, toggle } from "./dom.js";
import { fmtTimes, perCaller } from "./format.js";

const COL = 170;
const ROW = 72;
const NODE_W = 140;
const NODE_H = 54;
const MARGIN = 14;

// A stage's figures on one line: "212/s · p95 9.1 ms · 3% err" (no attempts in the window: "idle").
/**
 * @param {import('./wire').StageNowView | undefined} st
 * @returns {string}
 */
export function stageLine(st) {
  if (!st || !(st.attempts_per_s > 0)) return "idle";
  const rate = st.attempts_per_s >= 10 ? st.attempts_per_s.toFixed(0) : st.attempts_per_s.toFixed(1);
  const ms = st.p95_s * 1000;
  const p95 = ms >= 1000 ? `${st.p95_s.toFixed(1)} s` : ms >= 10 ? `${ms.toFixed(0)} ms` : `${ms.toFixed(1)} ms`;
  const share = st.error_share * 100;
  const err = share === 0 ? "0" : share < 1 ? "<1" : share.toFixed(0);
  return `${rate}/s · p95 ${p95} · ${err}% err`;
}

// A stage's attempts per caller: its attempts (its own retries included) over the callers arriving, so a tool's
// retries show multiplied by the callers' own: "×2.1 attempts per caller" (no callers or no attempts: "").
/**
 * @param {import('./wire').StageNowView | undefined} st
 * @param {number | undefined} callers callers per second (the snapshot's arrival_rate)
 * @returns {number | null}
 */
export function stageAmplification(st, callers) {
  return st && st.attempts_per_s > 0 ? perCaller(st.attempts_per_s, callers) : null;
}

/** @typedef {{root: SVGGElement, note: SVGTextElement, stats: SVGTextElement, amp: SVGTextElement}} NodeEls */
/** @typedef {{path: SVGPathElement, note: SVGTextElement}} EdgeEls */

export class DagView {
  /** @param {SVGSVGElement} svg */
  constructor(svg) {
    this.svg = svg;
    /** @type {Set<string>} */
    this.nodes = new Set();
    /** @type {Set<string>} */
    this.edges = new Set();
    this.shape = "";
    /** @type {Map<string, NodeEls>} */
    this.nodeEls = new Map();
    /** @type {Map<string, EdgeEls>} */
    this.edgeEls = new Map();
  }

  /**
   * @param {import('./wire').DagView} dag
   * @param {string[]} route
   * @param {import('./wire').FaultView[]} faults the active ones
   * @param {number} [callers] callers arriving per second (the snapshot's arrival_rate)
   */
  update(dag, route, faults, callers) {
    let grew = false;
    for (const n of [...dag.nodes, ...dag.removed_nodes]) if (!this.nodes.has(n)) (this.nodes.add(n), (grew = true));
    for (const e of [...dag.edges, ...dag.removed_edges]) if (!this.edges.has(e)) (this.edges.add(e), (grew = true));
    if (grew) this._layout();
    const removedNodes = new Set(dag.removed_nodes);
    const presentNodes = new Set(dag.nodes);
    const present = new Set(dag.edges);
    const removedEdges = new Set(dag.removed_edges);
    const open = new Set(dag.breakers_open || []);
    const stages = dag.stages || {};
    const onRoute = new Set(route);
    const routeEdges = new Set(route.slice(1).map((b, i) => `${route[i]}->${b}`));
    /** @type {Map<string, string[]>} */
    const hits = new Map();
    for (const f of faults) {
      for (const target of f.targets || []) {
        hits.set(target, [...(hits.get(target) || []), f.action]);
      }
    }
    for (const [name, g] of this.nodeEls) {
      const removed = removedNodes.has(name) || !presentNodes.has(name);
      toggle(g.root, "removed", removed);
      toggle(g.root, "route", onRoute.has(name));
      toggle(g.root, "breaker", open.has(name));
      toggle(g.root, "faulted", hits.has(name));
      setAttr(g.root, "data-state", removed ? "removed" : open.has(name) ? "breaker-open" : onRoute.has(name) ? "route" : "idle");
      const hit = hits.get(name);
      setText(g.note, hit ? `⚡ ${hit.join(", ")}` : open.has(name) ? "breaker open" : "");
      const st = stages[name];
      setText(g.stats, stageLine(st));
      const amp = stageAmplification(st, callers);
      setText(g.amp, amp === null ? "" : `${fmtTimes(amp)} attempts per caller`);
      setAttr(g.root, "data-amplification", amp === null ? "" : String(amp));
      setAttr(g.root, "data-breaker", st ? st.breaker : "closed");
      setAttr(g.root, "data-attempts-per-s", st ? String(st.attempts_per_s) : "0");
      setAttr(g.root, "data-error-share", st ? String(st.error_share) : "0");
      setAttr(g.root, "data-p95-s", st ? String(st.p95_s) : "0");
      toggle(g.root, "erring", Boolean(st && st.error_share >= 0.05));
    }
    for (const [key, e] of this.edgeEls) {
      const [a, b] = key.split("->");
      const removed = removedEdges.has(key) || !present.has(key) || removedNodes.has(a) || removedNodes.has(b);
      toggle(e.path, "removed", removed);
      toggle(e.path, "route", routeEdges.has(key));
      toggle(e.path, "faulted", hits.has(key));
      setAttr(e.path, "data-state", removed ? "removed" : routeEdges.has(key) ? "route" : "idle");
      const hit = hits.get(key);
      setText(e.note, hit ? `⚡ ${hit.join(", ")}` : "");
    }
    setAttr(this.svg, "data-route", route.join(" "));
  }

  _layout() {
    /** @type {Map<string, string[]>} */
    const incoming = new Map([...this.nodes].map((n) => [n, []]));
    for (const e of this.edges) {
      const [a, b] = e.split("->");
      incoming.set(b, [...(incoming.get(b) || []), a]);
    }
    /** @type {Map<string, number>} */
    const depth = new Map();
    /** @type {(n: string, seen: Set<string>) => number} */
    const depthOf = (n, seen) => {
      const known = depth.get(n);
      if (known !== undefined) return known;
      if (seen.has(n)) return 0; // a cycle: should not happen in a DAG, but never loop
      seen.add(n);
      const d = Math.max(-1, ...(incoming.get(n) || []).map((p) => depthOf(p, seen))) + 1;
      depth.set(n, d);
      return d;
    };
    /** @type {string[][]} */
    const columns = [];
    for (const n of [...this.nodes].sort()) {
      const d = depthOf(n, new Set());
      (columns[d] = columns[d] || []).push(n);
    }
    const rows = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
    const pos = new Map();
    columns.forEach((col, d) => {
      (col || []).forEach((n, i) => {
        const offset = ((rows - col.length) * ROW) / 2;
        pos.set(n, { x: MARGIN + d * COL, y: MARGIN + offset + i * ROW });
      });
    });
    const width = MARGIN * 2 + (columns.length - 1) * COL + NODE_W;
    const height = MARGIN * 2 + (rows - 1) * ROW + NODE_H + 14;
    setAttr(this.svg, "viewBox", `0 0 ${width} ${height}`);
    this.svg.replaceChildren();
    this.nodeEls.clear();
    this.edgeEls.clear();
    const edgeLayer = svgEl("g", { class: "edges" });
    const nodeLayer = svgEl("g", { class: "nodes" });
    for (const key of [...this.edges].sort()) {
      const [a, b] = key.split("->");
      const p = pos.get(a);
      const q = pos.get(b);
      if (!p || !q) continue;
      const x1 = p.x + NODE_W;
      const y1 = p.y + NODE_H / 2;
      const x2 = q.x;
      const y2 = q.y + NODE_H / 2;
      const mid = (x1 + x2) / 2;
      const path = svgEl("path", { class: "edge", "data-edge": key, d: `M${x1} ${y1}C${mid} ${y1} ${mid} ${y2} ${x2} ${y2}` }, svgEl("title", {}, key));
      const note = svgEl("text", { class: "edge-note", x: mid, y: (y1 + y2) / 2 - 4, "text-anchor": "middle" });
      edgeLayer.append(path, note);
      this.edgeEls.set(key, { path, note });
    }
    for (const [n, p] of pos) {
      const note = svgEl("text", { class: "node-note", x: p.x + NODE_W / 2, y: p.y + NODE_H + 12, "text-anchor": "middle" });
      const stats = svgEl("text", { class: "node-stats", x: p.x + NODE_W / 2, y: p.y + NODE_H - 20, "text-anchor": "middle" });
      const amp = svgEl("text", { class: "node-stats node-amp", x: p.x + NODE_W / 2, y: p.y + NODE_H - 8, "text-anchor": "middle" });
      const root = svgEl(
        "g",
        { class: "node", "data-node": n },
        svgEl("rect", { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 6 }),
        svgEl("text", { class: "node-name", x: p.x + NODE_W / 2, y: p.y + 17, "text-anchor": "middle" }, n),
        stats,
        amp,
        note,
      );
      nodeLayer.append(root);
      this.nodeEls.set(n, { root, note, stats, amp });
    }
    this.svg.append(edgeLayer, nodeLayer);
  }
}
