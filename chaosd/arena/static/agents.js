// Agent cards: orchestrator replicas (the leader marked), workers and producers, updated in place.
import { el, setAttr, setText, toggle } from "./dom.js";
import { AGENT_KINDS } from "./vocabulary.js";

export class AgentCards {
  constructor(parent) {
    this.groups = new Map();
    this.cards = new Map();
    for (const kind of AGENT_KINDS) {
      const list = el("ul", { class: "cards", "aria-label": `${kind}s` });
      parent.append(el("div", { class: "card-group" }, el("h3", {}, `${kind}s`), list));
      this.groups.set(kind, list);
    }
  }

  update(agents, leader, faults) {
    const hits = new Map();
    for (const f of faults) for (const t of f.targets || []) hits.set(t, [...(hits.get(t) || []), f.action]);
    for (const a of agents) {
      let card = this.cards.get(a.id);
      if (!card) {
        card = this._card(a);
        this.cards.set(a.id, card);
        (this.groups.get(a.kind) || this.groups.get("worker")).append(card.root);
      }
      const isLeader = a.id === leader;
      toggle(card.root, "leader", isLeader);
      setAttr(card.root, "data-state", a.state);
      setAttr(card.root, "data-leader", isLeader ? "true" : "false");
      setText(card.badge, isLeader ? "★ leader" : "");
      setText(card.state, a.gave_up ? `${a.state} (given up)` : a.state);
      setText(card.restarts, `restarts ${a.restarts}`);
      setText(card.fault, hits.has(a.id) ? `⚡ ${hits.get(a.id).join(", ")}` : "");
    }
  }

  _card(a) {
    const card = {
      badge: el("span", { class: "badge" }),
      state: el("span", { class: "state" }),
      restarts: el("span", { class: "restarts" }),
      fault: el("span", { class: "fault-note" }),
    };
    card.root = el("li", { class: "agent", "data-agent": a.id }, el("strong", {}, a.id), card.badge, card.state, card.restarts, card.fault);
    return card;
  }
}
