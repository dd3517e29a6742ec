// The types of vocabulary.js, which chaosd/arena/vocabulary.py writes from Python's tables when the page is served
// (tests/system/test_arena.py checks that both name the same constants).

/** Where a catalogue action's button goes: the ARES actions, chaosd's queue faults, a python stage's dependencies. */
export type ActionGroup = "ares" | "queue" | "dependency";
/** A state's colour on the page. */
export type Tone = "good" | "warn" | "bad" | "stall" | "info";

/** Every catalogue action (in catalogue order) → its group. */
export const ACTION_GROUPS: Readonly<Record<string, ActionGroup>>;
/** A catalogue action → what it does to its targets, as the event log tells it ("killed"). */
export const ACTION_VERBS: Readonly<Record<string, string>>;
/** The agent kinds, in the order of the agent cards. */
export const AGENT_KINDS: readonly string[];
/** A detector state → its tone. */
export const DETECTOR_TONES: Readonly<Record<string, Tone>>;
/** The flight recorder's event kinds. */
export const EVENT_KINDS: readonly string[];
/** A catalogue action → the setting whose timer paces its healing mechanism. */
export const HEAL_TIMERS: Readonly<Record<string, string>>;
