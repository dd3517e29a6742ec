// @ts-check
// The Arena, live: polls the status, the active faults and the telemetry series; follows the event stream.
import { AgentCards } from "./agents.js";
import { RequestError, getJSON } from "./api.js";
import { AttemptSamples } from "./attempts.js";
import { CHARTS, admissionChart, chartPointsFromSeries } from "./chartdefs.js";
import { LineChart } from "./charts.js";
import { Controls } from "./controls.js";
import { DagView } from "./dag.js";
import { byId, el } from "./dom.js";
import { EventLog } from "./log.js";
import { renderPostmortem } from "./postmortem.js";
import { clearProblem, reportProblem, watchProblems } from "./problems.js";
import { Stream } from "./stream.js";
import { TopBar } from "./top.js";

// Each fault's interval on the charts: from its injection to the service's recovery (or its end; still open:
// the chart's right edge). A failed fault is red.
/**
 * @param {import('./wire').FaultView[]} faults
 * @param {number} now
 * @returns {import('./charts.js').Mark[]}
 */
export function faultMarks(faults, now) {
  return faults.map((f) => {
    const end = f.service_recovered_at ?? (f.outcome === "active" || f.outcome === "recovering" ? null : f.reverted_at);
    return {
      from: Number(f.injected_at),
      to: end === null || end === undefined ? now : Number(end),
      cls: `fault ${f.outcome || ""}`,
      label: `#${f.id} ${f.action} → ${f.outcome}`,
    };
  });
}

// Runs ``task`` every ``ms`` with never two in flight; ``now()`` runs it at once (debounced). A request that
// fails is the connection line's to tell (the next round tries again); anything else went wrong drawing the
// page, and is shown in the problems banner under ``name`` until a round succeeds.
/**
 * @param {string} name
 * @param {() => Promise<void>} task
 * @param {number} ms
 * @returns {{start: () => Promise<void>, now: () => Promise<void>}}
 */
function poller(name, task, ms) {
  let busy = false;
  let again = false;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  const run = async () => {
    clearTimeout(timer);
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      await task();
      clearProblem(name);
    } catch (err) {
      if (!(err instanceof RequestError)) reportProblem(name, err);
    } finally {
      busy = false;
      timer = setTimeout(run, again ? 50 : ms);
      again = false;
    }
  };
  return { start: run, now: run };
}

async function boot() {
  const top = new TopBar(byId("top"));
  const dag = new DagView(byId("dag", SVGSVGElement));
  const agents = new AgentCards(byId("agents"));
  const log = new EventLog(byId("log"), byId("log-filter"));
  const chartsRoot = byId("charts");
  const charts = CHARTS.map((spec) => new LineChart(chartsRoot, spec));
  /** @type {LineChart | null} */
  let admission = null; // drawn once the first status names the policy
  /** @type {import('./charts.js').ChartPoint[]} */
  let points = [];
  /** @type {Controls | null} */
  let controls = null;
  /** @type {import('./wire').StatusBody | null} */
  let status = null;
  /** @type {import('./wire').FaultView[]} */
  let active = [];
  /** @type {import('./wire').FaultView[]} */
  let faults = []; // every fault still in memory: the charts' bands, the survival's verdicts
  const attempts = new AttemptSamples(); // the status's attempts and wasted work, which the series lacks

  const statusPoll = poller("status", async () => {
    /** @type {[import('./wire').StatusBody, {faults?: import('./wire').FaultView[]}]} */
    const [s, f] = await Promise.all([getJSON("/api/v1/status"), getJSON("/api/v1/faults?active=true")]);
    status = s;
    attempts.add(s.telemetry);
    active = f.faults || [];
    top.status(s);
    const spec = admission === null && s.admission ? admissionChart(s.admission.policy) : null;
    if (spec) {
      admission = new LineChart(chartsRoot, spec);
      admission.update(points, faultMarks(faults, points.length ? points[points.length - 1].t : 0));
    }
    dag.update(s.dag, s.route || [], active, (s.telemetry || {}).arrival_rate);
    agents.update(s.agents || [], s.leader, active);
    if (controls) {
      controls.update(s);
      // Survival's progress: elapsed of its duration, the faults it injected, their verdicts.
      const plan = s.survival === "running" || controls.showsSurvival ? await getJSON("/api/v1/survival").catch(() => null) : null;
      controls.survivalProgress(plan, faults);
    }
  }, 1000);
  const seriesPoll = poller("charts", async () => {
    const [ts, f] = await Promise.all([getJSON("/api/v1/timeseries"), getJSON("/api/v1/faults")]);
    top.faults(ts.faults);
    faults = f.faults || [];
    points = chartPointsFromSeries(ts.points, attempts.byStep(Number(ts.step_s) || 1));
    const now = points.length ? points[points.length - 1].t : 0;
    const marks = faultMarks(faults, now);
    for (const chart of charts) chart.update(points, marks);
    if (admission) admission.update(points, marks);
  }, 2000);

  const [actions, stages, first] = await Promise.all([
    getJSON("/api/v1/actions").catch(() => ({ actions: [] })),
    getJSON("/arena/stages").catch(() => ({ stages: null })),
    getJSON("/api/v1/status").catch(() => null),
  ]);
  const kinds = (first && first.dag && first.dag.kinds) || stages.stages; // the status's own, once it has them
  const refresh = () => {
    statusPoll.now();
    seriesPoll.now();
  };
  controls = new Controls(byId("controls"), actions.actions, kinds, refresh, first);
  statusPoll.start();
  seriesPoll.start();

  const stream = new Stream({
    checkRun: async () => (await getJSON("/api/v1/status")).run_id,
    onState: (state) => top.connectionState(state),
    onRunChange: (old, now) => log.marker(`— the daemon restarted: run ${old} ended, run ${now} began —`),
    onEvents: (batch) => {
      for (const e of batch) if (e.kind === "detector") top.detectorEvent(e.data);
      log.add(batch);
      if (batch.some((e) => e.kind !== "score")) statusPoll.now();
      if (batch.some((e) => e.kind === "fault" || e.kind === "score")) seriesPoll.now();
    },
  });
  stream.start();
  window.addEventListener("hashchange", () => openRun(location.hash));
  await listRuns();
  if (location.hash.startsWith("#run=")) openRun(location.hash);
  return status;
}

async function listRuns() {
  const select = byId("runs", HTMLSelectElement);
  /** @type {{runs?: import('./wire').RunSummary[]}} */
  const body = await getJSON("/api/v1/runs").catch(() => ({ runs: [] }));
  const runs = body.runs || [];
  select.replaceChildren(
    el("option", { value: "" }, runs.length ? "choose a run…" : "no runs stored"),
    ...runs.map((r) => el("option", { value: r.id }, `${r.id} — ${r.status}${r.score && r.score.grade ? ` (${r.score.grade})` : ""}`)),
  );
  byId("runs-open").addEventListener("click", () => {
    if (select.value) location.hash = `run=${encodeURIComponent(select.value)}`;
  });
}

/** @param {string} hash */
async function openRun(hash) {
  const root = byId("postmortem");
  const id = decodeURIComponent(hash.slice("#run=".length));
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) return;
  try {
    const run = await getJSON(`/api/v1/runs/${id}`);
    if (!run.report) {
      root.replaceChildren(el("p", {}, `Run ${id} has no report yet (${run.status}).`));
      return;
    }
    renderPostmortem(root, run.report, `Post-mortem: run ${id}`);
    root.scrollIntoView();
  } catch (err) {
    root.replaceChildren(el("p", { class: "error" }, `Run ${id} could not be read.`));
  }
}

watchProblems();
boot().catch((err) => reportProblem("page", err));
