// @ts-check
// The controls: the token, one button per catalogue action (target, parameters, TTL), the lever,
// survival and scenarios. A refused action shows the API's message next to its button.
import { getJSON, hasToken, send, setToken } from "./api.js";
import { el, setAttr, setText } from "./dom.js";
import { fmtSeconds, humanAction } from "./format.js";
import { ACTION_GROUPS, AGENT_KINDS } from "./vocabulary.js";

/** @typedef {import('./wire').ActionView} ActionView */
/** @typedef {import('./wire').StatusBody} StatusBody */
/** @typedef {import('./api.js').SendResult} SendResult */

/**
 * @param {(string | null | undefined)[]} list
 * @returns {string[]}
 */
function uniq(list) {
  return [...new Set(list.filter((x) => x !== null && x !== undefined && x !== ""))].map(String);
}

/**
 * @param {ActionView} action
 * @param {StatusBody} status
 * @returns {string[]}
 */
function targetOptions(action, status) {
  const kinds = action.targets || [];
  const dag = status.dag || { nodes: [], removed_nodes: [], edges: [], removed_edges: [] };
  const opts = [action.default_target];
  if (kinds.some((k) => AGENT_KINDS.includes(k))) {
    opts.push(...kinds, "random", ...(status.agents || []).filter((a) => kinds.includes(a.kind)).map((a) => a.id));
  } else if (kinds.includes("edge")) {
    opts.push("random", ...[...dag.edges, ...dag.removed_edges].sort());
  } else if (kinds.includes("dependency")) {
    const pairs = dag.dependencies || [];
    const names = pairs.flatMap((p) => p.split("/"));
    opts.push("random", ...pairs, ...[...new Set(names)].sort());
  } else if (!kinds.includes("pipeline")) {
    opts.push("random", ...kinds, ...[...dag.nodes, ...dag.removed_nodes].sort());
  }
  return uniq(opts);
}

// Whether an action applies to this daemon: a stage action needs a stage of one of its kinds (memory_corrupt a
// memory stage, mcp_disconnect an mcp stage), an edge action an edge. stageKinds: {stage: kind}, null if unknown.
/**
 * @param {ActionView} action
 * @param {Record<string, string> | null | undefined} stageKinds
 * @param {StatusBody | null} status
 * @returns {boolean}
 */
export function applies(action, stageKinds, status) {
  const kinds = action.targets || [];
  if (!stageKinds || !kinds.length || kinds.includes("pipeline")) return true;
  if (kinds.some((k) => AGENT_KINDS.includes(k))) return true;
  if (kinds.includes("edge")) {
    /** @type {Partial<import('./wire').DagView>} */
    const dag = (status && status.dag) || {};
    return Boolean((dag.edges || []).length + (dag.removed_edges || []).length) || !status;
  }
  if (kinds.includes("dependency")) return Boolean(((status && status.dag) || {}).dependencies?.length);
  return Object.values(stageKinds).some((k) => kinds.includes(k));
}

// A button that sends a change and says how it went beside itself.
/**
 * @param {string} label
 * @param {import('./dom.js').Attrs} attrs
 * @param {() => Promise<SendResult | {ok: boolean, message: string}>} run
 * @returns {{button: HTMLButtonElement, note: HTMLSpanElement}}
 */
function actionButton(label, attrs, run) {
  const note = el("span", { class: "note", role: "status", "aria-live": "polite" });
  const button = el("button", { type: "button", ...attrs }, label);
  button.addEventListener("click", async () => {
    note.classList.remove("error");
    setText(note, "…");
    /** @type {{ok: boolean, message: string}} */
    let result;
    try {
      result = await run();
    } catch (err) {
      result = { ok: false, message: err instanceof Error ? err.message : String(err) };
    }
    note.classList.toggle("error", !result.ok);
    setText(note, result.ok ? "✓ done" : `✗ ${result.message}`);
  });
  return { button, note };
}

export class Controls {
  /** @type {HTMLSpanElement} */ leverState;
  /** @type {HTMLButtonElement} */ leverButton;
  /** @type {string | null} */ lever = null;
  /** @type {HTMLSpanElement} */ survivalState;
  /** @type {HTMLProgressElement} */ survivalBar;
  /** @type {HTMLSpanElement} */ survivalText;
  /** @type {HTMLDivElement} */ survivalPanel;
  /** @type {HTMLSpanElement} */ scenarioState;

  /**
   * @param {HTMLElement} root
   * @param {ActionView[]} actions the catalogue (GET /api/v1/actions)
   * @param {Record<string, string> | null | undefined} stageKinds each stage's kind (null: not known)
   * @param {() => void} refresh polls the status and the series at once
   * @param {StatusBody | null} [status] the first status, if it came
   */
  constructor(root, actions, stageKinds, refresh, status = null) {
    this.refresh = refresh;
    /** @type {HTMLButtonElement[]} */
    this.blockable = [];
    /** @type {{action: ActionView, select: HTMLSelectElement, key: string}[]} */
    this.pickers = [];
    this.root = root;
    this.showsSurvival = false;
    const usable = actions.filter((a) => applies(a, stageKinds, status));
    // The dependency faults need a python stage that lists dependencies: without any they are not shown at all.
    const skipped = actions.filter((a) => !usable.includes(a) && ACTION_GROUPS[a.action] !== "dependency");
    root.append(this._tokenBox(), this._leverBox(), this._survivalBox(usable), this._scenarioBox());
    const ares = el("div", { class: "fault-list", role: "group", "aria-label": "ARES actions" });
    const queue = el("div", { class: "fault-list", role: "group", "aria-label": "Queue faults" });
    const calls = el("div", { class: "fault-list", role: "group", "aria-label": "Dependency faults" });
    for (const action of usable) {
      const group = ACTION_GROUPS[action.action];
      (group === "dependency" ? calls : group === "ares" ? ares : queue).append(this._faultRow(action));
    }
    root.append(el("h3", {}, "ARES actions"), ares, el("h3", {}, "Queue faults"), queue);
    if (calls.childElementCount) root.append(el("h3", {}, "Dependency faults"), calls);
    if (skipped.length) {
      const why = skipped.map((a) => {
        const kinds = a.targets || [];
        return `${a.action} (needs ${kinds.includes("edge") ? "an edge" : `a ${kinds.join(" or ")} stage`})`;
      });
      root.append(el("p", { class: "skipped", id: "skipped-actions" }, `Not offered (nothing in this DAG for them): ${why.join(", ")}.`));
    }
  }

  _tokenBox() {
    const input = el("input", { id: "token", type: "password", autocomplete: "off", spellcheck: "false" });
    const state = el("span", { class: "note", role: "status" }, hasToken() ? "token set for this tab" : "no token yet");
    const save = el("button", { type: "button", id: "token-save" }, "Use token");
    save.addEventListener("click", () => {
      setToken(input.value.trim());
      input.value = "";
      setText(state, hasToken() ? "token set for this tab" : "no token yet");
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") save.click();
    });
    return el("div", { class: "token-box" }, el("label", { for: "token" }, "API token "), input, save, state);
  }

  _leverBox() {
    this.leverState = el("span", { class: "lever-state", id: "lever-state" }, "lever: released");
    const { button, note } = actionButton("Pull lever", { id: "lever", class: "lever" }, async () => {
      const result = this.lever === null ? await send("POST", "/api/v1/lever", { reason: "pulled from the arena" }) : await send("DELETE", "/api/v1/lever");
      this.refresh();
      return result;
    });
    this.leverButton = button;
    this.lever = null;
    return el("div", { class: "lever-box" }, button, this.leverState, note);
  }

  /** @param {ActionView} action */
  _faultRow(action) {
    const id = action.action;
    const target = el("select", { id: `target-${id}`, "data-role": "target" });
    const ttl = el("input", { id: `ttl-${id}`, type: "number", min: 0.1, step: "any", value: 10, "data-role": "ttl" });
    /** @type {Record<string, HTMLInputElement>} */
    const params = {};
    const paramEls = Object.entries(action.params || {}).map(([name, p]) => {
      params[name] = el("input", { id: `param-${id}-${name}`, type: "number", min: p.min, max: p.max, step: "any", value: p.default, title: p.description });
      return el("label", { for: `param-${id}-${name}` }, `${name} `, el("small", {}, `(${p.min}–${p.max})`), " ", params[name]);
    });
    const { button, note } = actionButton(
      humanAction(id),
      { "data-action": id, "aria-describedby": `desc-${id}` },
      async () => {
        /** @type {{action: string, target: string, ttl: number, params?: Record<string, number>}} */
        const body = { action: id, target: target.value, ttl: Number(ttl.value) };
        /** @type {Record<string, number>} */
        const values = {};
        for (const [name, input] of Object.entries(params)) values[name] = Number(input.value);
        if (Object.keys(values).length) body.params = values;
        const result = await send("POST", "/api/v1/faults", body);
        this.refresh();
        return result;
      },
    );
    this.blockable.push(button);
    this.pickers.push({ action, select: target, key: "" });
    return el(
      "div",
      { class: "fault-row", "data-action": id },
      button,
      el("label", { for: `target-${id}` }, "target ", target),
      ...paramEls,
      el("label", { for: `ttl-${id}` }, "TTL s ", ttl),
      note,
      el("span", { class: "desc", id: `desc-${id}` }, action.description),
    );
  }

  /** @param {ActionView[]} actions those that apply */
  _survivalBox(actions) {
    const interval = el("input", { id: "survival-interval", type: "number", min: 1, step: "any", value: 10 });
    const duration = el("input", { id: "survival-duration", type: "number", min: 1, step: "any", value: 600 });
    const chosen = el("select", { id: "survival-actions", multiple: true, size: 4 }, ...actions.map((a) => el("option", { value: a.action }, a.action)));
    const start = actionButton("Start survival", { id: "survival-start" }, async () => {
      /** @type {{interval: number, duration: number, actions?: string[]}} */
      const body = { interval: Number(interval.value), duration: Number(duration.value) };
      const picked = [...chosen.selectedOptions].map((o) => o.value);
      if (picked.length) body.actions = picked;
      const result = await send("POST", "/api/v1/survival", body);
      this.refresh();
      return result;
    });
    const stop = actionButton("Stop survival", { id: "survival-stop" }, async () => {
      const result = await send("DELETE", "/api/v1/survival");
      this.refresh();
      return result;
    });
    this.blockable.push(start.button);
    this.survivalState = el("span", { class: "plan-state", id: "survival-state" }, "idle");
    this.survivalBar = el("progress", { id: "survival-bar", max: 1, value: 0, "aria-label": "survival elapsed" });
    this.survivalText = el("span", { id: "survival-progress-text" });
    this.survivalPanel = el("div", { class: "survival-progress", id: "survival-progress", hidden: true }, this.survivalBar, " ", this.survivalText);
    return el(
      "fieldset",
      { class: "plan" },
      el("legend", {}, "Survival"),
      el("label", { for: "survival-interval" }, "interval s ", interval),
      el("label", { for: "survival-duration" }, "duration s ", duration),
      el("label", { for: "survival-actions" }, "actions (none: all) ", chosen),
      start.button,
      stop.button,
      this.survivalState,
      start.note,
      stop.note,
      this.survivalPanel,
    );
  }

  // plan: GET /api/v1/survival (null: none to show); faults: every fault in memory, for the verdicts.
  /**
   * @param {import('./wire').PlanStatus | null} plan
   * @param {import('./wire').FaultView[]} faults
   */
  survivalProgress(plan, faults) {
    this.showsSurvival = Boolean(plan && plan.state === "running");
    if (!plan || plan.state === "idle" || plan.started_at === undefined) return;
    const elapsed = Number(plan.elapsed_s) || 0;
    const duration = Number(plan.duration_s) || 0;
    const from = Number(plan.started_at);
    const to = plan.ended_at === null || plan.ended_at === undefined ? Infinity : Number(plan.ended_at);
    const mine = faults.filter((f) => Number(f.injected_at) >= from && Number(f.injected_at) <= to);
    /** @param {string} outcome */
    const count = (outcome) => mine.filter((f) => f.outcome === outcome).length;
    const pending = count("active") + count("recovering");
    setAttr(this.survivalBar, "max", String(duration || 1));
    setAttr(this.survivalBar, "value", String(Math.min(elapsed, duration || elapsed)));
    const verdicts = `${count("recovered")} recovered, ${count("failed")} failed, ${pending} pending`;
    setText(this.survivalText, `${plan.state}: ${fmtSeconds(elapsed)} of ${fmtSeconds(duration)} · ${plan.actions ?? mine.length} faults · ${verdicts}`);
    if (this.survivalPanel.hidden) this.survivalPanel.hidden = false;
  }

  _scenarioBox() {
    const name = el("select", { id: "scenario-name" });
    const listed = el("span", { class: "note", id: "scenario-list-note", role: "status", "aria-live": "polite" });
    getJSON("/api/v1/scenarios")
      .then((body) => {
        for (const s of body.scenarios || []) name.append(el("option", { value: s }, s));
      })
      .catch((err) => {
        listed.classList.add("error");
        setText(listed, `✗ the scenarios could not be listed (${err.message})`);
      });
    const speed = el("input", { id: "scenario-speed", type: "number", min: 1, max: 1000, step: "any", value: 1 });
    const run = actionButton("Run scenario", { id: "scenario-run" }, async () => {
      const result = await send("POST", "/api/v1/scenarios/run", { name: name.value, speed: Number(speed.value) });
      this.refresh();
      return result;
    });
    const stop = actionButton("Stop scenario", { id: "scenario-stop" }, async () => {
      const result = await send("DELETE", "/api/v1/scenarios/current");
      this.refresh();
      return result;
    });
    this.blockable.push(run.button);
    this.scenarioState = el("span", { class: "plan-state", id: "scenario-state" }, "idle");
    return el(
      "fieldset",
      { class: "plan" },
      el("legend", {}, "Scenario"),
      el("label", { for: "scenario-name" }, "scenario ", name),
      listed,
      el("label", { for: "scenario-speed" }, "speed × ", speed),
      run.button,
      stop.button,
      this.scenarioState,
      run.note,
      stop.note,
    );
  }

  /** @param {StatusBody} status */
  update(status) {
    this.lever = status.lever ?? null;
    const pulled = this.lever !== null;
    setText(this.leverButton, pulled ? "Release lever" : "Pull lever");
    setText(this.leverState, pulled ? `lever pulled: ${this.lever}` : "lever: released");
    this.leverButton.classList.toggle("pulled", pulled);
    for (const b of this.blockable) if (b.disabled !== pulled) b.disabled = pulled;
    setText(this.survivalState, status.survival ?? "idle");
    setText(this.scenarioState, status.scenario ?? "idle");
    for (const picker of this.pickers) {
      const options = targetOptions(picker.action, status);
      const key = options.join("|");
      if (key === picker.key) continue;
      picker.key = key;
      const chosen = picker.select.value;
      picker.select.replaceChildren(...options.map((o) => el("option", { value: o }, o)));
      if (options.includes(chosen)) picker.select.value = chosen;
    }
  }
}
