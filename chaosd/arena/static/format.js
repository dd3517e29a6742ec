// How numbers, durations and action names read on the page.

export function fmtNum(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const n = Number(value);
  if (Math.abs(n) >= 1000) return n.toFixed(0);
  return n.toFixed(digits);
}

export function fmtSeconds(value) {
  if (value === null || value === undefined) return "–";
  const s = Number(value);
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  return `${(s / 60).toFixed(1)} min`;
}

export function humanAction(action) {
  const words = String(action).split("_").join(" ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

export function fmtClock(seconds) {
  const s = Math.max(0, Number(seconds) || 0);
  const m = Math.floor(s / 60);
  const rest = s - m * 60;
  return `${m}:${rest < 10 ? "0" : ""}${rest.toFixed(1)}`;
}
