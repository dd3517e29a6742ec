// @ts-check
// Agent cards: orchestrator replicas (the leader marked), workers and producers, updated in place.
import { el, setAttr, setText, toggle } from "./dom.js";
import { AGENT_KINDS } from "./vocabulary.js";

/** @typedef {{root: HTMLLIElement, badge: HTMLSpanElement, state: HTMLSpanElement, restarts: HTMLSpanElement, fault: HTMLSpanElement}} Card */

export class AgentCards {
  /** @param {HTMLElement} parent */
  constructor(parent) {
    /** @type {Map<string, HTMLUListElement>} */
    this.groups = new Map();
    /** @type {Map<string, Card>} */
    this.cards = new Map();
    for (const kind of AGENT_KINDS) {
      const list = el("ul", { class: "cards", "aria-label": `${kind}s` });
      parent.append(el("div", { class: "card-group" }, el("h3", {}, `${kind}s`), list));
      this.groups.set(kind, list);
    }
  }

  /**
   * @param {import('./wire').AgentView[]} agents
   * @param {string | null | undefined} leader
   * @param {import('./wire').FaultView[]} faults the active ones
   */
  update(agents, leader, faults) {
    /** @type {Map<string, string[]>} */
    const hits = new Map();
    for (const f of faults) for (const t of f.targets || []) hits.set(t, [...(hits.get(t) || []), f.action]);
    for (const a of agents) {
      let card = this.cards.get(a.id);
      if (!card) {
        card = this._card(a);
        this.cards.set(a.id, card);
        this.groups.get(a.kind)?.append(card.root); // every kind has its group: AGENT_KINDS is Python's
      }
      const isLeader = a.id === leader;
      toggle(card.root, "leader", isLeader);
      setAttr(card.root, "data-state", a.state);
      setAttr(card.root, "data-leader", isLeader ? "true" : "false");
      setText(card.badge, isLeader ? "★ leader" : "");
      setText(card.state, a.gave_up ? `${a.state} (given up)` : a.state);
      setText(card.restarts, `restarts ${a.restarts}`);
      const hit = hits.get(a.id);
      setText(card.fault, hit ? `⚡ ${hit.join(", ")}` : "");
    }
  }

  /**
   * @param {import('./wire').AgentView} a
   * @returns {Card}
   */
  _card(a) {
    const badge = el("span", { class: "badge" });
    const state = el("span", { class: "state" });
    const restarts = el("span", { class: "restarts" });
    const fault = el("span", { class: "fault-note" });
    const root = el("li", { class: "agent", "data-agent": a.id }, el("strong", {}, a.id), badge, state, restarts, fault);
    return { root, badge, state, restarts, fault };
  }
}
