// @ts-check
// The charts, defined once for the live page and the post-mortem: titles, series, labels and colours, keyed by
// the report timeline's names. Each page turns its own points into that vocabulary (chartPointsFromSeries for
// the live telemetry series, chartPointsFromTimeline for a report's timeline).

/** @type {import('./charts.js').ChartSpec[]} */
export const CHARTS = [
  { id: "queue_depth", title: "Queue depth (tasks)", series: [{ key: "queue_depth", label: "depth", cls: "s1" }], digits: 0 },
  { id: "queue_slope", title: "dQ/dt (tasks/s)", series: [{ key: "queue_slope", label: "dQ/dt", cls: "s2" }] },
  { id: "sojourn_p95", title: "p95 sojourn (s)", series: [{ key: "sojourn_p95", label: "p95", cls: "s2" }], digits: 3 },
  // Callers against attempts: in a retry storm attempts stand far above the callers, wasted work near the
  // throughput and goodput near 0.
  {
    id: "throughput",
    title: "Callers, attempts, throughput, goodput, wasted (per second)",
    series: [
      { key: "offered_per_s", label: "callers (offered)", cls: "s3" },
      { key: "attempts_per_s", label: "attempts", cls: "s5" },
      { key: "throughput_per_s", label: "throughput", cls: "s1" },
      { key: "goodput_per_s", label: "goodput", cls: "s4" },
      { key: "wasted_per_s", label: "wasted", cls: "s6" },
    ],
  },
];

// Only aimd moves the factor; the capacity policy bounds the queue instead.
/** @type {import('./charts.js').ChartSpec} */
export const THROTTLE_CHART = { id: "throttle", title: "Throttle factor (aimd)", series: [{ key: "throttle_factor", label: "factor", cls: "s2" }], digits: 2 };

// The admission chart: aimd's factor, or what was refused (offered − admitted) under another policy. A report
// has no admitted rate, so the post-mortem draws the factor's chart only (refused: false).
/**
 * @param {string | undefined} policy
 * @param {{refused?: boolean}} [options]
 * @returns {import('./charts.js').ChartSpec | null}
 */
export function admissionChart(policy, { refused = true } = {}) {
  if (policy === "aimd" || (!refused && policy === undefined)) return THROTTLE_CHART;
  if (!refused) return null;
  return {
    id: "refused",
    title: `Refused: offered − admitted (tasks/s; admission ${policy ?? "?"})`,
    series: [{ key: "refused", label: "refused", cls: "s2" }],
  };
}

// The live telemetry series (GET /api/v1/timeseries) in the charts' vocabulary. It has no attempts or wasted work:
// ``callerRates`` gives them where the page sampled them (attempts.js); elsewhere those lines have no point.
/**
 * @param {import('./wire').SeriesPoint[]} points
 * @param {(t: number) => import('./attempts.js').CallerRates | undefined} [callerRates]
 * @returns {import('./charts.js').ChartPoint[]}
 */
export function chartPointsFromSeries(points, callerRates = () => undefined) {
  return points.map((p) => {
    const sampled = callerRates(p.t);
    return {
      t: p.t,
      queue_depth: p.queue_depth,
      queue_slope: p.queue_slope,
      sojourn_p95: p.sojourn_p95,
      offered_per_s: p.arrival_rate,
      throughput_per_s: p.throughput,
      goodput_per_s: p.goodput,
      throttle_factor: p.throttle_factor,
      refused: Math.max(0, Number(p.arrival_rate) - Number(p.admitted_rate)),
      attempts_per_s: sampled?.attempts,
      wasted_per_s: sampled?.wasted,
    };
  });
}

// A report's timeline in the charts' vocabulary: its own names, plus dQ/dt from the queue depths (the change
// between a point and the one before, per second).
/**
 * @param {import('./wire').TimelinePoint[]} timeline
 * @returns {import('./charts.js').ChartPoint[]}
 */
export function chartPointsFromTimeline(timeline) {
  return timeline.map((p, i) => {
    const prev = timeline[i - 1];
    const dt = prev ? Number(p.t) - Number(prev.t) : 0;
    return { ...p, queue_slope: dt > 0 ? (Number(p.queue_depth) - Number(prev.queue_depth)) / dt : 0 };
  });
}
