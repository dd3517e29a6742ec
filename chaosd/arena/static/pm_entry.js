// The offline post-mortem file's entry point: its report is the JSON block embedded in the page.
import { renderPostmortem } from "./postmortem.js";

const pmData = document.getElementById("report-data");
renderPostmortem(document.getElementById("postmortem"), JSON.parse(pmData.textContent), document.title);
