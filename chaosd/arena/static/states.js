// @ts-check
// The detector's states and admission control in words, so the banner, the top bar and the log agree.
import { fmtNum, fmtSeconds, fmtTimes, perCaller } from "./format.js";
import { DETECTOR_TONES } from "./vocabulary.js";

// Each state's tone, which is its colour (chaosd/arena/vocabulary.py).
/**
 * @param {string | null | undefined} state
 * @returns {import('./vocabulary').Tone}
 */
export function toneOf(state) {
  return (state && DETECTOR_TONES[state]) || "info";
}

// The detector's reasons (GET /api/v1/events, kind detector) in plain words.
/** @type {Record<string, string>} */
const REASONS = {
  shedding: "shedding: admission or a full queue refuses work",
  queue_full: "the queue is full",
  queue_expired: "the queue head is older than the deadline",
  queue_growth: "the queue keeps growing",
  latency_growth: "p95 sojourn growing with the queue",
  overload: "more offered than served",
  "overload persists": "the overload persists",
  goodput_collapse: "the workers are saturated and goodput collapsed",
  retry_storm: "callers retrying: most work done is for callers who already left",
  goodput_falling: "goodput falling",
  tasks_failing: "tasks end failed, late or degraded while the queue is short",
  "failing persists": "tasks keep failing",
  "overload cleared": "the overload cleared",
  "failing cleared": "tasks end good again",
  recovered: "recovered",
  calm: "calm",
  "stall over": "the stall is over",
};

/**
 * @param {string | null | undefined} reason
 * @returns {string}
 */
export function reasonText(reason) {
  return (reason && REASONS[reason]) || String(reason ?? "");
}

// Tasks per second: whole numbers, one decimal under 10.
/**
 * @param {unknown} value
 * @returns {string}
 */
export function fmtRate(value) {
  const n = Number(value);
  if (!Number.isFinite(n)) return "–";
  return fmtNum(n, Math.abs(n) < 10 ? 1 : 0);
}

// How late the daemon's event loop ran, in ms, from a stall's reason ("tick 312 ms late"); 0 when unknown.
/**
 * @param {unknown} reason
 * @returns {number}
 */
export function stallLateMs(reason) {
  const m = /(\d+(?:\.\d+)?) ms late/.exec(String(reason ?? ""));
  return m ? Number(m[1]) : 0;
}

// The admission control in force and what it does now (GET /api/v1/status: admission, throttle_factor).
/**
 * @param {import('./wire').StatusBody} s
 * @returns {string}
 */
export function admissionText(s) {
  const a = s.admission || {};
  switch (a.policy) {
    case "capacity":
      // A stall's window rates are the pause's artefact: the limit is held, and the rate is not worth showing.
      if (s.detector === "stall") return `capacity: at most ${a.limit} waiting (held through the stall)`;
      return `capacity: at most ${a.limit} waiting, measured ${fmtRate(a.capacity_per_s)} tasks/s` + (a.standing ? " (standing queue kept short)" : "");
    case "aimd":
      return `aimd: producers at ${fmtNum(100 * s.throttle_factor, 0)} %`;
    case "none":
      return `none: only the full queue (${a.limit}) refuses`;
    default:
      return `producers at ${fmtNum(100 * s.throttle_factor, 0)} %`;
  }
}

/**
 * @param {import('./wire').StatusBody} s
 * @returns {string}
 */
function overloadText(s) {
  const t = s.telemetry || {};
  const a = s.admission || {};
  const shed = Number(a.shed_per_s ?? t.shed_rate) || 0;
  const offered = fmtRate(t.arrival_rate);
  if (shed > 0) {
    switch (a.policy) {
      case "capacity":
        return `shedding ${fmtRate(shed)} tasks/s of ${offered} offered; admitting at the measured capacity ${fmtRate(a.capacity_per_s)}/s (at most ${a.limit} waiting)`;
      case "aimd":
        return `refusing ${fmtRate(shed)} tasks/s of ${offered} offered; producers admitted at ${fmtNum(100 * s.throttle_factor, 0)} % (aimd)`;
      case "none":
        return `the full queue refuses ${fmtRate(shed)} tasks/s of ${offered} offered (no admission control)`;
      default:
        return `refusing ${fmtRate(shed)} tasks/s of ${offered} offered`;
    }
  }
  const depth = Number(t.queue_depth ?? (s.queue || {}).depth) || 0;
  const capacity = Number(t.capacity ?? (s.queue || {}).capacity) || 0;
  if (capacity && depth >= capacity) return `queue full (${depth} of ${capacity} tasks)`;
  if (Number(t.queue_fill) >= 0.85) return `queue nearly full (${depth} of ${capacity} tasks)`;
  if (depth > 0) return `backlog of ${depth} tasks, the oldest waiting ${fmtSeconds(t.head_age)}`;
  return "nothing refused and no backlog now; the alarm clears once the load stays calm";
}

// Failing: what share of the tasks ending is not good, and why admission control leaves it alone.
/**
 * @param {import('./wire').SnapshotView} t
 * @returns {string}
 */
function failingText(t) {
  const ending = Number(t.throughput) || 0;
  const good = Number(t.goodput) || 0;
  const bad = ending > 0 ? Math.min(1, Math.max(0, 1 - good / ending)) : 1;
  return (
    `${fmtNum(100 * bad, 0)} % of the tasks ending are not good (goodput ${fmtRate(good)}/s of ${fmtRate(ending)}/s ending, ` +
    `${fmtRate(t.arrival_rate)}/s offered); the queue is short: the work fails, not the load, and admission is not cut`
  );
}

// A retry storm: attempts against callers, and what the workers' time goes to.
/**
 * @param {import('./wire').SnapshotView} t
 * @returns {string}
 */
function stormText(t) {
  const times = perCaller(t.attempt_rate, t.arrival_rate);
  return (
    `${fmtRate(t.attempt_rate)} attempts/s for ${fmtRate(t.arrival_rate)} callers/s (${fmtTimes(times)} per caller), ` +
    `goodput ${fmtRate(t.goodput)}/s, wasted ${fmtRate(t.waste_rate)}/s: most work done is for callers who already left`
  );
}

// The banner for a status, or null when there is no alarm to raise (healthy, warning, recovering).
// stallMs: how late the event loop ran during this stall (0: not known).
/**
 * @param {import('./wire').StatusBody} s
 * @param {number} [stallMs]
 * @returns {{cls: string, text: string} | null}
 */
export function bannerFor(s, stallMs = 0) {
  const t = s.telemetry || {};
  const a = s.admission || {};
  switch (s.detector) {
    case "collapsed": {
      const capacity = Number(a.capacity_per_s) > 0 ? ` (measured capacity ${fmtRate(a.capacity_per_s)}/s)` : "";
      const throttle = a.policy === "aimd" ? `; producers at ${fmtNum(100 * s.throttle_factor, 0)} %` : "";
      return { cls: "collapse", text: `⚠ Collapse — goodput ${fmtRate(t.goodput)}/s of offered ${fmtRate(t.arrival_rate)}/s${capacity}${throttle}` };
    }
    case "metastable":
      return { cls: "metastable", text: `⚠ Retry storm — ${stormText(t)}` };
    case "overload":
      return { cls: "overload", text: `⚠ Overload — ${overloadText(s)}` };
    case "failing":
      return { cls: "failing", text: `✗ Failing — ${failingText(t)}` };
    case "stall": {
      const late = stallMs > 0 ? `event loop late by ${fmtNum(stallMs, 0)} ms` : "its event loop ran late";
      return { cls: "stall", text: `‖ Stall — the daemon's process was paused (${late}); nothing is cut` };
    }
    default:
      return null;
  }
}
