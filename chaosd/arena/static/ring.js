// @ts-check
// The score ring: the total as an arc, the grade in the middle, and the three components beside it.
import { el, setAttr, setText, svgEl } from "./dom.js";
import { fmtNum } from "./format.js";

const RADIUS = 42;
const CIRCUMFERENCE = 2 * Math.PI * RADIUS;

// The ring's colour follows the grade: A+ and A green, B and C amber, D and F red (none: muted).
/**
 * @param {string | null | undefined} grade
 * @returns {"good" | "warn" | "bad" | "none"}
 */
export function gradeTone(grade) {
  const letter = String(grade ?? "").charAt(0);
  if (letter === "A") return "good";
  if (letter === "B" || letter === "C") return "warn";
  if (letter === "D" || letter === "F") return "bad";
  return "none";
}

export class ScoreRing {
  /** @param {Element} parent */
  constructor(parent) {
    this.arc = svgEl("circle", { class: "ring-arc", cx: 50, cy: 50, r: RADIUS, transform: "rotate(-90 50 50)" });
    this.grade = svgEl("text", { class: "ring-grade", x: 50, y: 50, "text-anchor": "middle" });
    this.total = svgEl("text", { class: "ring-total", x: 50, y: 68, "text-anchor": "middle" });
    this.svg = svgEl(
      "svg",
      { class: "ring", viewBox: "0 0 100 100", role: "img", "aria-label": "score" },
      svgEl("circle", { class: "ring-track", cx: 50, cy: 50, r: RADIUS }),
      this.arc,
      this.grade,
      this.total,
    );
    /** @type {Record<string, HTMLElement>} */
    this.parts = {};
    const list = el("dl", { class: "ring-parts" });
    for (const [key, label] of [
      ["availability", "Availability"],
      ["recovery", "Recovery"],
      ["consistency", "Consistency"],
    ]) {
      this.parts[key] = el("dd", { "data-part": key }, "–");
      list.append(el("dt", {}, label), this.parts[key]);
    }
    this.root = el("div", { class: "score" }, this.svg, list);
    parent.append(this.root);
    this.update({});
  }

  /** @param {import('./wire').ScoreView} score */
  update(score) {
    const total = score.total ?? null;
    const share = total === null ? 0 : Math.max(0, Math.min(100, total)) / 100;
    setAttr(this.arc, "stroke-dasharray", `${(share * CIRCUMFERENCE).toFixed(2)} ${CIRCUMFERENCE.toFixed(2)}`);
    setText(this.grade, score.grade ?? "–");
    setText(this.total, fmtNum(total));
    setAttr(this.svg, "aria-label", `score ${fmtNum(total)}, grade ${score.grade ?? "none"}`);
    setAttr(this.svg, "data-total", total === null ? "" : String(total));
    setAttr(this.svg, "data-grade", score.grade ?? "");
    setAttr(this.svg, "data-tone", gradeTone(score.grade));
    for (const [key, node] of Object.entries(this.parts)) setText(node, fmtNum(score[/** @type {keyof import('./wire').ScoreView} */ (key)]));
  }
}
