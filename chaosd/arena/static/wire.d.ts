// The daemon's JSON as the page reads it: the fields it uses of chaosd/views (StatusBody, FaultView, ReportView, …).
// Optional where the page does without (a report written by an older chaosd, a status fed by a test).

export type Num = number | null | undefined;

export interface ParamView {
  default: number;
  min: number;
  max: number;
  description: string;
}

/** A catalogue action (GET /api/v1/actions). */
export interface ActionView {
  action: string;
  description: string;
  targets?: string[];
  default_target: string;
  params?: Record<string, ParamView>;
}

export interface PhasesView {
  spans?: Record<string, number> | null;
  dominant?: string | null;
}

export interface PredictionView {
  predicted_s?: number | null;
  backlog: number;
  arrival_rate: number;
  capacity_rate: number;
}

export interface IncidentCause {
  stage?: string | null;
  reason?: string | null;
  failed?: number;
  error?: string | null;
  signals?: string[];
}

/** What recoveryWhy reads: a fault, an incident, or a fault or incident event. */
export interface Recovery {
  phases?: PhasesView | null;
  prediction?: PredictionView | null;
  actions?: string[];
  action?: string;
  cause?: IncidentCause | null;
}

export interface FaultView extends Recovery {
  id: number;
  action: string;
  targets?: string[];
  injected_at: number;
  reverted_at?: number | null;
  service_recovered_at?: number | null;
  recovery_s?: number | null;
  recovered?: boolean;
  outcome?: string;
}

export interface IncidentView extends Recovery {
  id: number;
  faults?: number[];
  started_at: number;
  recovery_s?: number | null;
  outcome?: string;
  unplanned?: boolean;
}

export interface ScoreView {
  total?: number | null;
  grade?: string | null;
  availability?: number | null;
  recovery?: number | null;
  consistency?: number | null;
}

export interface AgentView {
  id: string;
  kind: string;
  state: string;
  restarts: number;
  gave_up?: boolean;
}

export interface StageNowView {
  kind?: string;
  attempts_per_s: number;
  p95_s: number;
  error_share: number;
  breaker: string;
}

export interface DagView {
  nodes: string[];
  edges: string[];
  removed_nodes: string[];
  removed_edges: string[];
  breakers_open?: string[];
  dependencies?: string[];
  stages?: Record<string, StageNowView>;
  kinds?: Record<string, string>;
}

export interface AdmissionView {
  policy?: string;
  limit?: number;
  standing?: boolean;
  capacity_per_s?: number;
  shed_per_s?: number;
}

/** One telemetry tick (the status's telemetry). */
export interface SnapshotView {
  t?: number;
  queue_depth?: number;
  capacity?: number;
  queue_fill?: number;
  head_age?: number;
  arrival_rate?: number;
  throughput?: number;
  goodput?: number;
  shed_rate?: number;
  lateness?: number;
  /** attempts offered per second: first attempts, callers' retries, refused ones */
  attempt_rate?: number;
  /** completions per second for callers that had stopped waiting */
  waste_rate?: number;
}

/** GET /api/v1/status. */
export interface StatusBody {
  run_id: string;
  agents?: AgentView[];
  leader?: string | null;
  route?: string[];
  dag: DagView;
  queue?: { depth: number; capacity: number };
  detector: string;
  throttle_factor: number;
  admission?: AdmissionView;
  telemetry?: SnapshotView | null;
  score?: ScoreView;
  lever?: string | null;
  survival?: string;
  scenario?: string;
}

/** GET /api/v1/survival. */
export interface PlanStatus {
  state: string;
  started_at?: number;
  ended_at?: number | null;
  elapsed_s?: number;
  duration_s?: number;
  actions?: number;
}

/** The fault totals of GET /api/v1/timeseries. */
export interface FaultTally {
  injected: number;
  recovered: number;
  failed: number;
  mean_recovery_s: number | null;
}

/** A point of GET /api/v1/timeseries. */
export interface SeriesPoint {
  t: number;
  queue_depth: number;
  queue_slope: number;
  sojourn_p95: number;
  throughput: number;
  arrival_rate: number;
  admitted_rate: number;
  goodput: number;
  throttle_factor: number;
}

export interface TimeseriesBody {
  step_s: number;
  points: SeriesPoint[];
  faults: FaultTally;
}

/** A point of a report's timeline. */
export interface TimelinePoint {
  t: number;
  queue_depth: number;
  [key: string]: unknown;
}

export interface EpisodeView {
  kind?: string;
  reason: string;
  detected_at: number;
  cleared_at?: number | null;
}

/** A run report (chaosd run, the daemon): what the post-mortem shows of it. */
export interface ReportView {
  scenario?: string | null;
  seed?: number | null;
  clock?: string;
  duration_s?: number;
  score?: ScoreView;
  timeline?: TimelinePoint[];
  faults?: FaultView[];
  incidents?: IncidentView[];
  faults_summary?: { faults_listed?: number; injected?: number };
  throttle?: {
    policy?: string;
    refused?: number;
    lowest_limit?: number | null;
    capacity_per_s?: number;
    lowest_factor: number;
    decreases?: number;
  } | null;
  collapse?: {
    alarms?: number;
    episodes?: EpisodeView[];
    count?: number;
    failing?: number;
    time_failing_s?: number;
    stalls?: number;
    final_state?: string;
  } | null;
  verdict?: { passed: boolean; reason: string } | null;
  diagnostics?: { cause: string; count: number; share: number }[];
  expectations?: { check: string; expected: unknown; measured: unknown; passed: boolean }[];
}

/** GET /api/v1/runs. */
export interface RunSummary {
  id: string;
  status: string;
  score?: ScoreView | null;
}

/** An event of the stream, as the log takes it: its data is the recorder's payload, read field by field. */
export interface StreamEvent {
  id: number | null;
  kind: string;
  data: EventData;
}

/** Any event's payload: the narration reads the fields of its kind. */
export type EventData = Record<string, any>;
