// @ts-check
// The offline post-mortem file's entry point: its report is the JSON block embedded in the page.
import { byId } from "./dom.js";
import { renderPostmortem } from "./postmortem.js";

renderPostmortem(byId("postmortem"), JSON.parse(byId("report-data").textContent ?? ""), document.title);
