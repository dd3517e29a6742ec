// @ts-check
// The top bar: score ring, fault counters, the detector, attempts per caller, admission control, the lever, the
// connection; and the banner under it while the detector raises an alarm (collapse, retry storm and failing: red,
// overload: amber) or the daemon stalled.
import { el, setAttr, setText, toggle } from "./dom.js";
import { fmtSeconds, fmtTimes, perCaller } from "./format.js";
import { ScoreRing } from "./ring.js";
import { admissionText, bannerFor, fmtRate, stallLateMs, toneOf } from "./states.js";
import { DETECTOR_TONES } from "./vocabulary.js";

const TONE_CLASSES = [...new Set(Object.values(DETECTOR_TONES))];
// A tick this late counts as the stall's own measure (the detector calls 50 ms a stall by default; a running
// loop is late by well under a millisecond).
const LATE_MS = 20;
// Attempts per caller shown amber from here: the detector's default storm_attempts, where retries start to count.
const STORM_ATTEMPTS = 1.5;

export class TopBar {
  /** @param {HTMLElement} root the <header>; the banner goes right after it */
  constructor(root) {
    this.ring = new ScoreRing(root);
    /** @type {Record<string, HTMLElement>} */
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
    this.amplification = el("dd", { id: "amplification" }, "–");
    this.admission = el("dd", { id: "admission" }, "–");
    this.lever = el("dd", { id: "lever-top" }, "–");
    this.plans = el("dd", { id: "plans" }, "–");
    list.append(
      el("div", {}, el("dt", {}, "Detector"), this.detector),
      el("div", {}, el("dt", {}, "Attempts per caller"), this.amplification),
      el("div", {}, el("dt", {}, "Admission"), this.admission),
      el("div", {}, el("dt", {}, "Lever"), this.lever),
      el("div", {}, el("dt", {}, "Survival / scenario"), this.plans),
    );
    this.connection = el("p", { id: "connection", role: "status", "aria-live": "polite" }, "connecting…");
    this.banner = el("p", { id: "banner", class: "banner", role: "alert", "data-state": "", hidden: true });
    root.append(list, this.connection);
    root.after(this.banner);
    /** @type {import('./wire').EventData | null} */
    this.lastDetector = null; // the newest detector event: a stall's reason says how late the loop ran
    this.stallMs = 0;
  }

  /** @param {import('./wire').EventData} d a detector event */
  detectorEvent(d) {
    this.lastDetector = d;
  }

  /** @param {import('./wire').StatusBody} s */
  status(s) {
    this.ring.update(s.score || {});
    const state = s.detector;
    setText(this.detector, state);
    setAttr(this.detector, "data-state", state);
    for (const tone of TONE_CLASSES) toggle(this.detector, tone, tone === toneOf(state) && state !== "healthy");
    this._amplification(s.telemetry || {});
    setText(this.admission, admissionText(s));
    setAttr(this.admission, "data-policy", (s.admission || {}).policy ?? "");
    setText(this.lever, s.lever === null || s.lever === undefined ? "released" : `pulled (${s.lever})`);
    setText(this.plans, `${s.survival ?? "idle"} / ${s.scenario ?? "idle"}`);
    this._banner(s);
  }

  // Attempts per caller: 1 while nobody retries; each retry a caller makes adds to it.
  /** @param {import('./wire').SnapshotView} t */
  _amplification(t) {
    const times = perCaller(t.attempt_rate, t.arrival_rate);
    setText(this.amplification, fmtTimes(times));
    setAttr(this.amplification, "data-value", times === null ? "" : String(times));
    setAttr(this.amplification, "title", times === null ? "no callers arriving" : `${fmtRate(t.attempt_rate)} attempts/s for ${fmtRate(t.arrival_rate)} callers/s`);
    toggle(this.amplification, "warn", times !== null && times >= STORM_ATTEMPTS);
  }

  /** @param {import('./wire').StatusBody} s */
  _banner(s) {
    if (s.detector === "stall") {
      // The tick that ran late is rarely the one a poll sees: keep the worst lateness of this stall.
      const seen = 1000 * (Number((s.telemetry || {}).lateness) || 0);
      const told = this.lastDetector && this.lastDetector.new === "stall" ? stallLateMs(this.lastDetector.reason) : 0;
      this.stallMs = Math.max(this.stallMs, seen >= LATE_MS ? seen : 0, told);
    } else {
      this.stallMs = 0;
    }
    const banner = bannerFor(s, this.stallMs);
    const cls = banner ? `banner ${banner.cls}` : "banner";
    if (this.banner.className !== cls) this.banner.className = cls;
    setAttr(this.banner, "data-state", s.detector ?? "");
    setAttr(this.banner, "role", banner && banner.cls === "stall" ? "status" : "alert");
    if (this.banner.hidden !== !banner) this.banner.hidden = !banner;
    setText(this.banner, banner ? banner.text : "");
  }

  /** @param {import('./wire').FaultTally} tally */
  faults(tally) {
    setText(this.counters.injected, tally.injected);
    setText(this.counters.recovered, tally.recovered);
    setText(this.counters.failed, tally.failed);
    setText(this.counters.mean_recovery_s, fmtSeconds(tally.mean_recovery_s));
  }

  /** @param {string} state */
  connectionState(state) {
    const text = /** @type {Record<string, string>} */ ({ connecting: "connecting…", live: "● live", reconnecting: "reconnecting…" })[state] || state;
    setText(this.connection, text);
    this.connection.setAttribute("data-state", state);
  }
}
