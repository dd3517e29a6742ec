// The top bar: score ring, fault counters, the detector (a banner while collapsed), the lever, the connection.
import { el, setText, toggle } from "./dom.js";
import { fmtSeconds } from "./format.js";
import { ScoreRing } from "./ring.js";

export class TopBar {
  constructor(root) {
    this.ring = new ScoreRing(root);
    this.counters = {};
    const list = el("dl", { class: "counters" });
    for (const [key, label] of [
      ["injected", "Faults injected"],
      ["recovered", "Recovered"],
      ["failed", "Failed"],
      ["mean_recovery_s", "Mean recovery"],
    ]) {
      this.counters[key] = el("dd", { id: `count-${key}` }, "–");
      list.append(el("div", {}, el("dt", {}, label), this.counters[key]));
    }
    this.detector = el("dd", { id: "detector" }, "–");
    this.lever = el("dd", { id: "lever-top" }, "–");
    this.plans = el("dd", { id: "plans" }, "–");
    list.append(
      el("div", {}, el("dt", {}, "Detector"), this.detector),
      el("div", {}, el("dt", {}, "Lever"), this.lever),
      el("div", {}, el("dt", {}, "Survival / scenario"), this.plans),
    );
    this.connection = el("p", { id: "connection", role: "status", "aria-live": "polite" }, "connecting…");
    this.banner = el("p", { id: "banner", class: "banner", role: "alert", hidden: true });
    root.append(list, this.connection);
    root.parentNode.insertBefore(this.banner, root.nextSibling);
  }

  status(s) {
    this.ring.update(s.score || {});
    setText(this.detector, s.detector);
    toggle(this.detector, "bad", s.detector !== "healthy");
    setText(this.lever, s.lever === null || s.lever === undefined ? "released" : `pulled (${s.lever})`);
    setText(this.plans, `${s.survival ?? "idle"} / ${s.scenario ?? "idle"}`);
    const collapsed = s.detector === "collapsed";
    if (this.banner.hidden === collapsed) this.banner.hidden = !collapsed;
    setText(this.banner, collapsed ? `⚠ Congestion collapse detected — throttle at ${Math.round(100 * s.throttle_factor)} %` : "");
  }

  faults(tally) {
    setText(this.counters.injected, tally.injected);
    setText(this.counters.recovered, tally.recovered);
    setText(this.counters.failed, tally.failed);
    setText(this.counters.mean_recovery_s, fmtSeconds(tally.mean_recovery_s));
  }

  connectionState(state) {
    const text = { connecting: "connecting…", live: "● live", reconnecting: "reconnecting…" }[state] || state;
    setText(this.connection, text);
    this.connection.setAttribute("data-state", state);
  }
}
