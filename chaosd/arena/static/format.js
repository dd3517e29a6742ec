// @ts-check
// How numbers, durations and action names read on the page.
import { HEAL_TIMERS } from "./vocabulary.js";

/**
 * @param {unknown} value
 * @param {number} [digits]
 * @returns {string}
 */
export function fmtNum(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const n = Number(value);
  if (Math.abs(n) >= 1000) return n.toFixed(0);
  return n.toFixed(digits);
}

/**
 * @param {unknown} value
 * @returns {string}
 */
export function fmtSeconds(value) {
  if (value === null || value === undefined) return "–";
  const s = Number(value);
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  return `${(s / 60).toFixed(1)} min`;
}

// Attempts per caller (the amplification): the attempts offered per second over the callers per second; null
// while no caller arrives, where the ratio means nothing.
/**
 * @param {unknown} attempts
 * @param {unknown} callers
 * @returns {number | null}
 */
export function perCaller(attempts, callers) {
  const a = Number(attempts);
  const c = Number(callers);
  return c > 0 && Number.isFinite(a) ? a / c : null;
}

// An amplification as read: "×3.9" ("–" when there is none).
/**
 * @param {number | null} times
 * @returns {string}
 */
export function fmtTimes(times) {
  return times === null ? "–" : `×${fmtNum(times, 1)}`;
}

/**
 * @param {string} action
 * @returns {string}
 */
export function humanAction(action) {
  const words = String(action).split("_").join(" ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * @param {unknown} seconds
 * @returns {string}
 */
export function fmtClock(seconds) {
  const s = Math.max(0, Number(seconds) || 0);
  const m = Math.floor(s / 60);
  const rest = s - m * 60;
  return `${m}:${rest < 10 ? "0" : ""}${rest.toFixed(1)}`;
}

// Where a recovery's time went (its `phases` and `prediction`): the longest phase, and what would shorten it.
/** @type {Record<string, (span: string, p: import('./wire').PredictionView | null | undefined, actions: string[], cause: import('./wire').IncidentCause | null | undefined) => string>} */
const PHASE_WHY = {
  detection: (span) => `${span} before it showed; telemetry.window and recovery.tolerance set how soon`,
  heal: (span, p, actions, cause) => {
    if (!actions.length && cause && cause.stage) {
      return `${span} until ${cause.stage} stopped failing (${cause.reason}${cause.error ? `, ${cause.error}` : ""}); nothing was injected`;
    }
    const timers = [...new Set(actions.map((a) => HEAL_TIMERS[a]).filter(Boolean))].sort();
    return `${span} until the mechanism healed; ${timers.length ? `${timers.join(" and ")} sets it` : "its own timers set it"}`;
  },
  drain: (span, p) =>
    p && p.backlog
      ? `${span} draining ${p.backlog} tasks at ${fmtNum(p.capacity_rate - p.arrival_rate)}/s of spare capacity; more workers would shorten it`
      : `${span} draining the backlog; more workers would shorten it`,
  settle: (span) => `${span} for p95, goodput and errors to settle once the queue drained`,
};

/**
 * @param {import('./wire').Recovery | null | undefined} v
 * @returns {string}
 */
export function recoveryWhy(v) {
  const phases = v && v.phases;
  const dominant = phases && phases.dominant;
  if (!dominant || !phases.spans || !PHASE_WHY[dominant]) return "";
  const p = v.prediction;
  const model = !p ? "" : p.predicted_s === null || p.predicted_s === undefined ? " (cannot drain)" : ` (fluid model ${fmtSeconds(p.predicted_s)})`;
  const actions = v.actions || (v.action ? [v.action] : []);
  return `${PHASE_WHY[dominant](fmtSeconds(phases.spans[dominant]), p, actions, v.cause)}${model}`;
}
