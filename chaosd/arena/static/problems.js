// @ts-check
// What went wrong in the page itself (a part that failed to draw, a script error): told in the problems banner
// and on the console, never dropped. One line per part, so a poll failing every second stays one line.
import { el, setText } from "./dom.js";

/** @type {Map<string, HTMLLIElement>} */
const lines = new Map(); // part → its <li>

function banner() {
  return document.getElementById("problems");
}

/**
 * @param {unknown} err
 * @returns {string}
 */
function describe(err) {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/**
 * @param {string} part
 * @param {unknown} err
 */
export function reportProblem(part, err) {
  const text = `${part}: ${describe(err)}`;
  const root = banner();
  let line = lines.get(part);
  if (line && line.textContent === text) return; // already shown (and logged)
  console.error(`chaosd arena: ${text}`, err);
  if (!root) return;
  if (!line) {
    line = el("li", { "data-part": part });
    lines.set(part, line);
    root.querySelector("ul")?.append(line);
  }
  setText(line, text);
  root.hidden = false;
}

/** @param {string} part */
export function clearProblem(part) {
  const line = lines.get(part);
  if (!line) return;
  line.remove();
  lines.delete(part);
  const root = banner();
  if (root && !lines.size) root.hidden = true;
}

// Errors no caller caught (an event handler, a promise nobody awaited) are shown too.
export function watchProblems() {
  window.addEventListener("error", (e) => {
    // The browser's note that a chart resized while it was drawn is no error: the next frame redraws it.
    if (!e.error && /^ResizeObserver loop/.test(e.message)) return;
    reportProblem("script", e.error ?? e.message);
  });
  window.addEventListener("unhandledrejection", (e) => reportProblem("script", e.reason));
}
