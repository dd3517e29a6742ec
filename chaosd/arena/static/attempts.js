// @ts-check
// Attempts and wasted work per second for the live charts. The telemetry series (GET /api/v1/timeseries) does not
// carry them; the status the page polls every second does (its telemetry's attempt_rate and waste_rate), so the page
// keeps those, one per telemetry tick, from when it opened, and the charts read them by the series' steps.

const MAX_SAMPLES = 600; // the series' own bound: ten minutes at a second a step

/** @typedef {{attempts: number, wasted: number}} CallerRates */

export class AttemptSamples {
  constructor() {
    /** @type {Map<number, CallerRates>} by the tick's run time: a status polled twice in one tick is one sample */
    this.byTick = new Map();
  }

  /** @param {import('./wire').SnapshotView | null | undefined} t the status's telemetry */
  add(t) {
    const at = Number(t && t.t);
    if (!t || !Number.isFinite(at) || this.byTick.has(at)) return;
    this.byTick.set(at, { attempts: Number(t.attempt_rate), wasted: Number(t.waste_rate) });
    if (this.byTick.size > MAX_SAMPLES) this.byTick.delete(this.byTick.keys().next().value ?? at);
  }

  // The lookup of the sample in each step of ``step_s`` (the newest in it): undefined where none was polled.
  /**
   * @param {number} step the series' step_s
   * @returns {(t: number) => CallerRates | undefined}
   */
  byStep(step) {
    /** @type {Map<number, CallerRates>} */
    const steps = new Map();
    for (const [t, rates] of this.byTick) steps.set(Math.floor(t / step), rates);
    return (t) => steps.get(Math.floor(t / step));
  }
}
