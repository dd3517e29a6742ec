// @ts-check
// The event stream: EventSource with Last-Event-ID resume, de-duplication by id, run changes, and
// batching: frames are queued as they come and handed over at most once per animation frame.
import { EVENT_KINDS } from "./vocabulary.js";

// The recorder's events, and the stream's own notices (chaosd/api/sse.py: a gap in the ids, an overflow, shutdown).
const KINDS = [...EVENT_KINDS, "gap", "overflow", "close"];
const REPLAY = 200; // a fresh page shows the recent past
const RESTART_REPLAY = 1000; // a restarted daemon: everything its new run has said so far

/**
 * @typedef {object} StreamHandlers
 * @property {(batch: import('./wire').StreamEvent[]) => void} onEvents
 * @property {(state: "connecting" | "live" | "reconnecting") => void} onState
 * @property {(oldId: string, newId: string) => void} onRunChange
 * @property {() => Promise<string>} checkRun the run id (from /api/v1/status)
 */

export class Stream {
  /** @param {StreamHandlers} handlers */
  constructor(handlers) {
    this.h = handlers;
    this.lastId = 0;
    /** @type {string | null} */
    this.runId = null;
    /** @type {import('./wire').StreamEvent[]} */
    this.pending = [];
    this.checking = false;
    this.scheduled = false;
    /** @type {EventSource | null} */
    this.es = null;
    this.backoff = 1000;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
  }

  start() {
    this.h.onState("connecting");
    this._open(`/api/v1/events?replay=${REPLAY}`);
  }

  /** @param {string} url */
  _open(url) {
    const es = new EventSource(url);
    this.es = es;
    es.onopen = () => this._opened(es);
    es.onerror = () => {
      if (es !== this.es) return;
      this.h.onState("reconnecting");
      // EventSource retries by itself, except after a refusal (an HTTP error): then we do, with backoff.
      if (es.readyState === EventSource.CLOSED) this._retry();
    };
    for (const kind of KINDS) es.addEventListener(kind, (m) => this._frame(es, kind, m));
  }

  _retry() {
    if (this.es) this.es.close();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this._open(this.lastId ? `/api/v1/events?last_event_id=${this.lastId}` : `/api/v1/events?replay=${REPLAY}`);
    }, this.backoff);
    this.backoff = Math.min(this.backoff * 2, 5000);
  }

  /** @param {EventSource} es */
  async _opened(es) {
    this.checking = true;
    /** @type {string} */
    let runId;
    try {
      runId = await this.h.checkRun();
    } catch (err) {
      if (es === this.es) this._retry();
      return;
    }
    if (es !== this.es) return;
    if (this.runId !== null && runId !== this.runId) {
      // A restarted daemon counts ids from 1 again: start over on its new run instead of dropping events.
      const old = this.runId;
      this.runId = runId;
      es.close();
      this.pending = [];
      this.lastId = 0;
      this.h.onRunChange(old, runId);
      this._open(`/api/v1/events?replay=${RESTART_REPLAY}`);
      return;
    }
    this.runId = runId;
    this.backoff = 1000;
    this.checking = false;
    this.h.onState("live");
    this._schedule();
  }

  /**
   * @param {EventSource} es
   * @param {string} kind
   * @param {MessageEvent<string>} message
   */
  _frame(es, kind, message) {
    if (es !== this.es) return;
    /** @type {import('./wire').EventData} */
    let data = {};
    try {
      data = JSON.parse(message.data);
    } catch (err) {
      return;
    }
    if (kind === "close") this.h.onState("reconnecting");
    const id = message.lastEventId ? Number(message.lastEventId) : null;
    if (kind === "gap" || kind === "overflow" || kind === "close") {
      this.pending.push({ id: null, kind, data });
    } else {
      if (id === null || id <= this.lastId) return; // already shown
      this.lastId = id;
      this.pending.push({ id, kind, data });
    }
    this._schedule();
  }

  _schedule() {
    if (this.scheduled || this.checking || !this.pending.length) return;
    this.scheduled = true;
    const flush = () => {
      this.scheduled = false;
      if (this.checking) return;
      const batch = this.pending;
      this.pending = [];
      if (batch.length) this.h.onEvents(batch);
    };
    if (document.hidden) setTimeout(flush, 250); // no animation frames in a background tab
    else requestAnimationFrame(flush);
  }
}
