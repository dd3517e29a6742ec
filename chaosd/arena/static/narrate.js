// @ts-check
// Events told in plain words: "✗ kill_leader → orchestrator-0 killed", "✓ orchestrator-1 elected leader (0.48 s)".
import { fmtNum, fmtSeconds, recoveryWhy } from "./format.js";
import { reasonText, stallLateMs, toneOf } from "./states.js";
import { ACTION_VERBS } from "./vocabulary.js";

/** @typedef {import('./wire').EventData} EventData */
/** @typedef {[tone: string, text: string, run?: string]} Told a line's tone, its text, and the run of lines it rewrites */
/**
 * What a later event needs of earlier ones: when the leader was lost, each fault's injection time and targets, the
 * throttle's run of steps and its last factor.
 * @typedef {object} NarrationContext
 * @property {number | null} leaderLostAt
 * @property {Map<number, number>} faults
 * @property {Map<number, string>} [targets]
 * @property {{action: string, steps: number, from: number | null | undefined} | null} throttleRun
 * @property {number | null} throttleFactor
 */

// The log's filter groups, in the order of their check boxes.
/** @type {Record<string, string>} */
export const GROUPS = {
  fault: "faults",
  incident: "incidents",
  leader: "leader",
  agent: "agents",
  supervisor: "agents",
  detector: "detector",
  throttle: "admission",
  dag: "DAG",
  breaker: "DAG",
  lever: "lever",
  survival: "plans",
  scenario: "plans",
  window: "plans",
  score: "score",
  clients: "callers",
};
// Shown only on demand (their check boxes start unticked): the score's every move and aimd's every step.
export const QUIET_GROUPS = ["score", "throttle steps"];

// A throttle event is a step of aimd (increase, decrease: told on one line per run, but many) or a change of
// the capacity policy's bound (rare, one line each: admission).
/**
 * @param {string} kind
 * @param {EventData | null} data
 * @returns {string}
 */
export function groupOf(kind, data) {
  if (kind === "throttle" && data && (data.action === "increase" || data.action === "decrease")) return "throttle steps";
  return GROUPS[kind] || "other";
}

// One line per state change of the detector, in the state's own tone (a stall is never told as an alarm).
/**
 * @param {EventData} d
 * @returns {Told}
 */
function narrateDetector(d) {
  const from = `(${d.old} → ${d.new})`;
  if (d.old === "stall") return ["info", `▶ stall over: judged afresh, ${d.new} ${from}`];
  // Out of a storm into anything but a stall: the storm's end is the news, whatever comes next.
  if (d.old === "metastable" && d.new !== "metastable" && d.new !== "stall") {
    return [toneOf(d.new), `↺ retry storm over, ${d.new}: ${reasonText(d.reason)} ${from}`];
  }
  switch (d.new) {
    case "metastable":
      return ["bad", `✗ retry storm (metastable): ${reasonText(d.reason)} ${from}`];
    case "collapsed":
      return ["bad", `✗ collapse: ${reasonText(d.reason)} ${from}`];
    case "overload":
      return ["warn", `⚠ overload: more offered than served${d.reason === "overload" ? "" : `, ${reasonText(d.reason)}`} ${from}`];
    case "failing":
      return ["bad", `✗ failing: ${reasonText(d.reason)} ${from}`];
    case "stall": {
      const ms = stallLateMs(d.reason);
      const late = ms ? `its event loop ran ${fmtNum(ms, 0)} ms late` : "its event loop ran late";
      return ["stall", `‖ stall: the daemon's process was paused (${late}); nothing is judged or cut ${from}`];
    }
    case "warning":
      return ["warn", `⚠ warning: ${reasonText(d.reason)} ${from}`];
    case "recovering":
      return ["info", `↺ recovering: ${reasonText(d.reason)} ${from}`];
    case "healthy":
      return ["good", `✓ healthy: ${reasonText(d.reason)} ${from}`];
    default:
      return [toneOf(d.new), `detector ${d.old} → ${d.new} (${d.reason})`];
  }
}

// Admission control's changes. capacity: "standing" / "bound", rare, one line each. aimd: a run of steps in one
// direction is one line, rewritten at each step (the third element: the run it belongs to).
/**
 * @param {EventData} d
 * @param {NarrationContext} ctx
 * @returns {Told}
 */
function narrateThrottle(d, ctx) {
  /** @param {number} f */
  const pct = (f) => `${fmtNum(100 * f, 0)} %`;
  if (d.action === "standing") {
    ctx.throttleRun = null;
    return ["warn", `⇅ admission: a queue stood above the target; at most ${d.limit} tasks may wait now (the target's worth)`];
  }
  if (d.action === "bound") {
    ctx.throttleRun = null;
    return ["info", `⇅ admission: no standing queue; at most ${d.limit} tasks may wait (the deadline's bound)`];
  }
  if (d.action !== "decrease" && d.action !== "increase") {
    ctx.throttleRun = null;
    return ["info", `⇅ throttle ${d.action}: factor ${pct(d.factor)}, limit ${d.limit}`];
  }
  const run = ctx.throttleRun;
  const steps = run && run.action === d.action ? run.steps + 1 : 1;
  const from = run && run.action === d.action ? run.from : ctx.throttleFactor; // null: not seen yet
  ctx.throttleRun = { action: d.action, steps, from };
  ctx.throttleFactor = d.factor;
  const verb = d.action === "decrease" ? "down" : "up";
  const count = steps > 1 ? ` ${steps} steps` : "";
  const was = from === null || from === undefined ? "" : ` (from ${pct(from)})`;
  return [d.action === "decrease" ? "warn" : "info", `⇅ throttle ${verb}${count}: producers at ${pct(d.factor)}${was}`, `throttle:${d.action}`];
}

// What each fault's healing mechanism did once it is seen to work (the fault itself may still be in force).
/** @type {Record<string, (on: string) => string>} */
const HEALED = {
  kill_leader: () => "a standby holds the dispatch lease",
  kill_orchestrator: () => "the replicas are serving again",
  kill_agent: (on) => `${on || "the agent"} is back (the supervisor)`,
  pause_agent: () => "the others carry the load",
  network_partition: () => "task leases brought its tasks back",
  tool_timeout: (on) => `tasks go on past ${on || "the tool"}, degraded, while its calls still hang`,
  memory_corrupt: () => "checksums caught the corruption; entries restored",
  mcp_disconnect: () => "the MCP connection is back",
  llm_failure: () => "the fallback model answers",
  remove_node: () => "the route goes around it",
  remove_edge: () => "the route goes around it",
};

// The callers' policy in a few words: "wait 500 ms, 3 retries on timeout/refused, budget 10 %".
/**
 * @param {Record<string, any> | null | undefined} c a ClientsConfig as JSON
 * @returns {string}
 */
export function clientsText(c) {
  if (!c) return "";
  const parts = [Number(c.timeout) > 0 ? `wait ${fmtSeconds(c.timeout)}` : "wait forever"];
  const retries = Number(c.retries) || 0;
  const on = Array.isArray(c.retry_on) && c.retry_on.length ? ` on ${c.retry_on.join("/")}` : "";
  parts.push(retries > 0 ? `${retries} ${retries === 1 ? "retry" : "retries"}${on}` : "no retries");
  if (c.budget && c.budget.ratio !== undefined) parts.push(`budget ${fmtNum(100 * Number(c.budget.ratio), 0)} %`);
  if (c.patience) parts.push(`patience ${fmtSeconds(c.patience.mean)} (${c.patience.distribution ?? "?"})`);
  if (c.drop_expired) parts.push("expired work dropped");
  if (c.retry_after) parts.push("retry-after honoured");
  return parts.join(", ");
}

// An unplanned incident's cause: "answer · error, 2900 failed attempts" (a python stage adds its exception), or
// the figures that left tolerance when no stage failed ("p95, queue out of tolerance").
/**
 * @param {import('./wire').IncidentCause | null | undefined} cause
 * @returns {string}
 */
export function causeText(cause) {
  if (!cause) return "";
  const signals = (cause.signals || []).join(", ");
  if (!cause.stage) return signals ? `${signals} out of tolerance` : "";
  const error = cause.error ? ` (${cause.error})` : "";
  return `${cause.stage} · ${cause.reason}${error}, ${cause.failed} failed attempt${cause.failed === 1 ? "" : "s"}`;
}

// ctx keeps what a later event needs: when the leader was lost, each fault's injection time, the throttle's run.
/**
 * @param {string} kind
 * @param {EventData} d
 * @param {NarrationContext} ctx
 * @returns {Told}
 */
export function narrate(kind, d, ctx) {
  /** @param {unknown} v */
  const list = (v) => (Array.isArray(v) ? v.join(", ") : String(v ?? ""));
  switch (kind) {
    case "fault":
      switch (d.state) {
        case "injected":
          ctx.faults.set(d.id, d.t);
          (ctx.targets ??= new Map()).set(d.id, list(d.targets));
          return ["bad", `✗ ${d.action} → ${list(d.targets)} ${ACTION_VERBS[d.action] || "hit"} (fault #${d.id})`];
        case "mechanism_recovered": {
          // What the runtime's healing did, not that the fault is over: a hung tool still hangs while tasks go on.
          const on = ctx.targets?.get(d.id) || "";
          const done = HEALED[d.action];
          return ["info", `↺ ${d.action} #${d.id}: ${done ? done(on) : "the runtime's mechanism did its job"}`];
        }
        case "recovered":
          return [
            "good",
            `✓ service recovered after ${d.action} #${d.id}` +
              (d.recovery_s === null || d.recovery_s === undefined ? "" : ` (${fmtSeconds(d.recovery_s)})`) +
              (recoveryWhy(d) ? `: ${recoveryWhy(d)}` : ""),
          ];
        case "failed":
          return ["bad", `✗ ${d.action} #${d.id}: service did not recover in time`];
        case "reverted":
          return ["info", `· ${d.action} #${d.id} reverted (${d.by ?? "?"})`];
        case "unmeasured":
          return ["info", `· ${d.action} #${d.id}: recovery not measured (no steady state to compare with)`];
        default:
          return ["info", `${d.action} #${d.id}: ${d.state}`];
      }
    case "incident": {
      // An incident nobody injected: the service left its steady state with no fault in play.
      const cause = causeText(d.cause);
      const why = cause ? `: ${cause}` : "";
      switch (d.state) {
        case "opened":
          return ["bad", `✗ incident #${d.id} opened, no fault injected (since ${fmtNum(d.started_at)} s)${why}`];
        case "recovered":
          return [
            "good",
            `✓ incident #${d.id} recovered` +
              (d.recovery_s === null || d.recovery_s === undefined ? "" : ` in ${fmtSeconds(d.recovery_s)}`) +
              why +
              (recoveryWhy(d) ? ` (${recoveryWhy(d)})` : ""),
          ];
        case "failed":
          return ["bad", `✗ incident #${d.id}: service did not recover in time${why}`];
        default:
          return ["info", `· incident #${d.id}: ${d.state}${why}`];
      }
    }
    case "leader":
      if (d.state === "lost") {
        ctx.leaderLostAt = d.t;
        return ["bad", `✗ leader ${d.replica} lost`];
      }
      if (d.state === "elected") {
        const took = ctx.leaderLostAt === null ? "" : ` (${fmtSeconds(d.t - ctx.leaderLostAt)})`;
        ctx.leaderLostAt = null;
        return ["good", `✓ ${d.replica} elected leader${took}`];
      }
      return ["info", `leader ${d.replica}: ${d.state}`];
    case "agent":
      if (d.state === "dead") return ["bad", `✗ ${d.agent} down`];
      if (d.state === "stalled") return ["bad", `✗ ${d.agent} stalled: its process lives but does not beat`];
      return ["good", `✓ ${d.agent} ${d.state === "alive" ? "back up" : d.state}`];
    case "supervisor":
      return d.state === "gave_up"
        ? ["bad", `✗ supervisor gave up on ${d.agent} after ${d.restarts} restarts`]
        : ["info", `↺ supervisor ${d.state} ${d.agent}`];
    case "detector":
      return narrateDetector(d);
    case "throttle":
      return narrateThrottle(d, ctx);
    case "dag":
      return ["info", `⤳ route ${list(d.route)}` + (d.bypassed && d.bypassed.length ? ` (bypassing ${list(d.bypassed)})` : "")];
    case "breaker":
      return d.open && d.open.length ? ["warn", `⚡ circuit open: ${list(d.open)}`] : ["good", "✓ every circuit closed"];
    case "lever":
      return d.state === "pulled"
        ? ["bad", `⛔ lever pulled (${d.reason ?? "no reason"}): ${d.reverted} fault(s) reverted`]
        : ["good", "✓ lever released"];
    case "survival":
    case "scenario": {
      const name = kind === "scenario" ? ` ${d.name ?? ""}` : "";
      const extra = d.reason ? ` (${d.reason})` : d.interval ? ` (a fault every ${fmtSeconds(d.interval)})` : "";
      return ["info", `▶ ${kind}${name} ${d.state}${extra}`];
    }
    case "window":
      return ["info", `▭ window ${d.id} “${d.name ?? ""}” ${d.state}` + (d.grade ? `: ${d.grade}` : "")];
    case "score":
      return ["info", `score ${fmtNum(d.total)} (${d.grade ?? "–"})`];
    case "clients": {
      // A policy pushed at run time: what changed, then the whole policy now in force.
      const changed = Array.isArray(d.changed) && d.changed.length ? `changed ${list(d.changed)}` : "nothing changed";
      return ["info", `⚙ callers' policy pushed (${changed}): ${clientsText(d.clients)}`];
    }
    case "mcp":
      return ["good", `✓ MCP ${d.stage} ${d.state}`];
    case "memory":
      return ["good", `✓ memory ${d.stage} ${d.state}`];
    case "run":
      return ["info", `run ${d.state}`];
    case "gap":
      return ["warn", `⚠ events ${d.from}–${d.to} were missed (no longer buffered)`];
    case "overflow":
      return ["warn", `⚠ too many events at once: resuming after #${d.resume_after}`];
    case "close":
      return ["warn", "⚠ the daemon is shutting down; reconnecting…"];
    default:
      return ["info", `${kind}: ${JSON.stringify(d)}`];
  }
}
