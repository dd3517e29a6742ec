// @ts-check
// The post-mortem of a finished run: its score, its timeline with the faults and the detector's alarms marked
// (overload amber, collapse and failing red), admission control, its verdicts.
import { CHARTS, admissionChart, chartPointsFromTimeline } from "./chartdefs.js";
import { LineChart } from "./charts.js";
import { el } from "./dom.js";
import { fmtNum, fmtSeconds, recoveryWhy } from "./format.js";
import { causeText } from "./narrate.js";
import { ScoreRing } from "./ring.js";

/** @typedef {import('./wire').ReportView} ReportView */

// The charts of a report: the shared ones, and the throttle factor's when the run used aimd (or a report too
// old to say).
/**
 * @param {ReportView} report
 * @returns {import('./charts.js').ChartSpec[]}
 */
export function pmCharts(report) {
  const admission = admissionChart((report.throttle || {}).policy, { refused: false });
  return admission ? [...CHARTS, admission] : CHARTS;
}

/**
 * @param {ReportView} report
 * @returns {string}
 */
function pmAdmission(report) {
  const th = report.throttle;
  if (!th) return "–";
  const refused = th.refused === undefined ? "" : `, ${th.refused} refused`;
  switch (th.policy) {
    case "capacity":
      return `capacity: limit down to ${th.lowest_limit ?? "–"} waiting, measured ${fmtNum(th.capacity_per_s, 0)} tasks/s${refused}`;
    case "aimd":
      return `aimd: factor down to ${fmtNum(100 * th.lowest_factor, 0)} %, ${th.decreases ?? 0} decreases${refused}`;
    case "none":
      return `none: only the full queue refuses${refused}`;
    default:
      return `factor down to ${fmtNum(100 * th.lowest_factor, 0)} %`;
  }
}

/**
 * @param {ReportView} report
 * @returns {string}
 */
function pmDetector(report) {
  const c = report.collapse;
  if (!c) return "–";
  const alarms = c.alarms ?? (c.episodes || []).length;
  const parts = [`${alarms} alarm${alarms === 1 ? "" : "s"}`, `${c.count ?? 0} collapsed`];
  if (c.failing) parts.push(`${c.failing} failing (${fmtSeconds(c.time_failing_s)})`);
  if (c.stalls !== undefined) parts.push(`${c.stalls} stall${c.stalls === 1 ? "" : "s"}`);
  return `${parts.join(", ")}; ended ${c.final_state ?? "–"}`;
}

// p95 of sorted numbers by nearest rank, ceil(0.95·n) in integers (as the text summary's): an observed value.
/**
 * @param {number[]} sorted
 * @returns {number | null}
 */
function pmP95(sorted) {
  if (!sorted.length) return null;
  return sorted[Math.floor((95 * sorted.length + 99) / 100) - 1];
}

// One row per action, by name (as in the text summary): faults, recovered, mean and p95 recovery time.
/**
 * @param {import('./wire').FaultView[]} faults
 * @returns {{action: string, faults: number, recovered: number, mean: number | null, p95: number | null}[]}
 */
export function actionSummary(faults) {
  /** @type {Map<string, import('./wire').FaultView[]>} */
  const by = new Map();
  for (const f of faults) {
    let list = by.get(f.action);
    if (!list) by.set(f.action, (list = []));
    list.push(f);
  }
  return [...by].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([action, list]) => {
    const times = list.map((f) => f.recovery_s).filter((v) => v !== null && v !== undefined).map(Number).sort((a, b) => a - b);
    const mean = times.length ? times.reduce((a, b) => a + b, 0) / times.length : null;
    return { action, faults: list.length, recovered: list.filter((f) => f.outcome === "recovered" || f.recovered === true).length, mean, p95: pmP95(times) };
  });
}

// A long run's report lists only its newest faults: the tables say so.
/**
 * @param {ReportView} report
 * @returns {HTMLElement[]}
 */
function pmListed(report) {
  const fs = report.faults_summary || {};
  const listed = fs.faults_listed ?? (report.faults || []).length;
  const injected = fs.injected ?? listed;
  return listed < injected ? [el("p", { class: "pm-note", id: "pm-listed" }, `The newest ${listed} of ${injected} faults.`)] : [];
}

/**
 * @param {string[]} headers
 * @param {string[][]} rows
 * @param {string} id
 * @returns {HTMLTableElement}
 */
function pmTable(headers, rows, id) {
  return el(
    "table",
    { id },
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))),
  );
}

/**
 * @param {ReportView} report
 * @returns {import('./charts.js').Mark[]}
 */
function pmMarks(report) {
  const end = Number(report.duration_s) || 0;
  const marks = [];
  for (const f of report.faults || []) {
    const from = Number(f.injected_at);
    const to = f.service_recovered_at ?? f.reverted_at ?? end;
    marks.push({ from, to: Number(to), cls: `fault ${f.outcome || ""}`, label: `#${f.id} ${f.action} → ${f.outcome}` });
  }
  for (const e of (report.collapse && report.collapse.episodes) || []) {
    const kind = e.kind === "overload" || e.kind === "failing" ? e.kind : "collapse"; // a report without kinds had collapses only
    marks.push({ from: Number(e.detected_at), to: Number(e.cleared_at ?? end), cls: kind, label: `${kind}: ${e.reason}` });
  }
  return marks;
}

/**
 * @param {HTMLElement} root
 * @param {ReportView} report
 * @param {string} [title]
 */
export function renderPostmortem(root, report, title) {
  const score = report.score || {};
  const head = el("header", { class: "pm-head" });
  const ring = new ScoreRing(head);
  ring.update(score);
  const facts = el(
    "dl",
    { class: "pm-facts" },
    el("dt", {}, "Scenario"),
    el("dd", {}, report.scenario ?? "–"),
    el("dt", {}, "Seed"),
    el("dd", {}, report.seed ?? "–"),
    el("dt", {}, "Clock"),
    el("dd", {}, report.clock ?? "–"),
    el("dt", {}, "Duration"),
    el("dd", {}, fmtSeconds(report.duration_s)),
    el("dt", {}, "Faults"),
    el("dd", {}, String((report.faults || []).length)),
    el("dt", {}, "Detector"),
    el("dd", { class: "pm-detector" }, pmDetector(report)),
    el("dt", {}, "Admission"),
    el("dd", { class: "pm-admission" }, pmAdmission(report)),
    el("dt", {}, "Verdict"),
    el("dd", { class: "pm-verdict" }, report.verdict ? `${report.verdict.passed ? "pass" : "FAIL"}: ${report.verdict.reason}` : "–"),
  );
  head.append(facts);
  const charts = el("div", { class: "charts" });
  const timeline = report.timeline || [];
  const marks = pmMarks(report);
  const points = chartPointsFromTimeline(timeline);
  for (const spec of pmCharts(report)) new LineChart(charts, spec).update(points, marks);
  const summary = pmTable(
    ["action", "faults", "recovered", "mean recovery", "p95 recovery"],
    actionSummary(report.faults || []).map((a) => [a.action, String(a.faults), String(a.recovered), fmtSeconds(a.mean), fmtSeconds(a.p95)]),
    "pm-actions",
  );
  const faults = pmTable(
    ["#", "action", "targets", "injected", "service recovered", "recovery", "where the time went", "outcome"],
    (report.faults || []).map((f) => [
      String(f.id),
      f.action,
      (f.targets || []).join(", "),
      `${fmtNum(f.injected_at)} s`,
      f.service_recovered_at === null || f.service_recovered_at === undefined ? "–" : `${fmtNum(f.service_recovered_at)} s`,
      fmtSeconds(f.recovery_s),
      recoveryWhy(f) || "–",
      f.outcome ?? "–",
    ]),
    "pm-faults",
  );
  // An incident of one fault says nothing its fault's row does not: only those grouping several are listed,
  // and those nobody injected (unplanned: the service left its steady state with no fault in play), with their cause.
  const grouped = (report.incidents || []).filter((i) => (i.faults || []).length > 1 || i.unplanned);
  const incidents = pmTable(
    ["#", "faults", "actions", "started", "recovery", "where the time went", "outcome", "cause"],
    grouped.map((i) => [
      String(i.id),
      (i.faults || []).map((id) => `#${id}`).join(", ") || "none injected",
      (i.actions || []).join(", ") || "–",
      `${fmtNum(i.started_at)} s`,
      fmtSeconds(i.recovery_s),
      recoveryWhy(i) || "–",
      i.outcome ?? "–",
      i.unplanned ? `unplanned: ${causeText(i.cause) || "–"}` : "–",
    ]),
    "pm-incidents",
  );
  const diagnostics = pmTable(
    ["cause", "count", "share"],
    (report.diagnostics || []).map((d) => [d.cause, String(d.count), `${fmtNum(100 * d.share, 0)} %`]),
    "pm-diagnostics",
  );
  const judged = report.expectations || [];
  const expectations = judged.length
    ? [
        el("h3", {}, "Expectations"),
        pmTable(
          ["check", "expected", "measured", "passed"],
          judged.map((e) => [e.check, String(e.expected), String(e.measured), e.passed ? "✓" : "✗"]),
          "pm-expectations",
        ),
      ]
    : [];
  const nFaults = (report.faults || []).length;
  root.replaceChildren(
    el("h2", {}, title || `Post-mortem: ${report.scenario ?? "run"}`),
    head,
    charts,
    el("h3", {}, "Per action"),
    summary,
    ...pmListed(report),
    el("h3", {}, "Faults"),
    faults,
    el("h3", {}, "Incidents"),
    grouped.length
      ? incidents
      : el("p", { class: "pm-note", id: "pm-incidents-none" }, nFaults ? "No faults overlapped: each was its own incident (see Faults); none nobody injected." : "No faults, and no incident nobody injected."),
    el("h3", {}, "Diagnostics"),
    diagnostics,
    ...expectations,
  );
}
