// @ts-check
// The event log: one line per event, newest at the top, at most MAX_LINES in the DOM, filterable by group.
import { el } from "./dom.js";
import { fmtClock } from "./format.js";
import { GROUPS, QUIET_GROUPS, groupOf, narrate } from "./narrate.js";

const MAX_LINES = 500;

export class EventLog {
  /**
   * @param {HTMLElement} list the log's <ol>
   * @param {HTMLElement} filters the <fieldset> of its check boxes
   */
  constructor(list, filters) {
    this.list = list;
    /** @type {import('./narrate.js').NarrationContext} */
    this.ctx = { leaderLostAt: null, faults: new Map(), throttleRun: null, throttleFactor: null };
    /** @type {{key: string, line: HTMLLIElement} | null} */
    this.run = null; // the line a run of throttle steps is told on: {key, line}
    // Narratives by default; the score's lines and aimd's steps only when their boxes are ticked.
    const groups = [...new Set([...Object.values(GROUPS), "throttle steps", "other"])];
    for (const group of groups) {
      const shown = !QUIET_GROUPS.includes(group);
      const cls = `hide-${group.replace(/\W/g, "")}`;
      const box = el("input", { type: "checkbox", checked: shown, "data-group": group });
      box.addEventListener("change", () => this.list.classList.toggle(cls, !box.checked));
      this.list.classList.toggle(cls, !shown);
      filters.append(el("label", { class: "filter" }, box, ` ${group}`));
    }
  }

  /** @param {import('./wire').StreamEvent[]} batch */
  add(batch) {
    // In a storm only the newest lines can be kept anyway: every event is told (the story needs them
    // all), but no more than the cap become DOM nodes.
    const from = Math.max(0, batch.length - MAX_LINES);
    /** @type {HTMLLIElement[]} */
    const lines = [];
    batch.forEach(({ id, kind, data }, i) => {
      /** @type {import('./narrate.js').Told} */
      let told;
      try {
        told = narrate(kind, data, this.ctx);
      } catch (err) {
        told = ["info", `${kind} (unreadable)`];
      }
      if (this.ctx.faults.size > 1000) this.ctx.faults.clear();
      const key = told[2] || null;
      if (key && this.run && this.run.key === key) {
        // The run goes on: its line is told again, at the top, with the latest step.
        const at = lines.indexOf(this.run.line);
        if (at >= 0) lines.splice(at, 1);
        else this.run.line.remove();
      }
      if (key || kind === "throttle") this.run = null;
      if (i < from) return;
      const line = this._line(id, kind, data, told);
      lines.push(line);
      if (key) this.run = { key, line };
    });
    this.list.prepend(...lines.reverse());
    while (this.list.childElementCount > MAX_LINES) this.list.lastElementChild?.remove();
  }

  /** @param {string} text */
  marker(text) {
    // A new run: its throttle starts afresh.
    Object.assign(this.ctx, { throttleRun: null, throttleFactor: null });
    this.run = null;
    this.list.prepend(this._line(null, "marker", null, ["warn", text]));
  }

  /**
   * @param {number | null} id
   * @param {string} kind
   * @param {import('./wire').EventData | null} data
   * @param {import('./narrate.js').Told} told
   * @returns {HTMLLIElement}
   */
  _line(id, kind, data, [tone, text]) {
    const t = data ? data.t : null;
    const group = groupOf(kind, data).replace(/\W/g, "");
    return el(
      "li",
      { class: `ev ${tone}`, "data-kind": kind, "data-group": group, "data-id": id ?? "" },
      el("time", {}, t === null || t === undefined ? "" : fmtClock(t)),
      " ",
      el("span", { class: "msg" }, text),
    );
  }
}
