// The tool timeline: a row per call, in time order (a result that comes after other rows, as
// after an approval, is drawn there); long work shows its seconds; a parked turn's calls wait.
import { el, json } from "./dom.js";
import { add, log } from "./log.js";
import { state } from "./state.js";

let ticking = null;

function watchRunning(row) {
  row.dataset.since = String(state.frameAt.getTime());
  if (!ticking) ticking = setInterval(tickRunning, 1000);
}

function tickRunning() {
  const rows = log.querySelectorAll(".tool[data-state=requested][data-since]");
  if (!rows.length) {
    clearInterval(ticking);
    ticking = null;
    return;
  }
  for (const row of rows) {
    const seconds = Math.floor((Date.now() - Number(row.dataset.since)) / 1000);
    const label = row.querySelector(".tool-state");
    if (seconds >= 2 && !label.textContent.includes("result below")) label.textContent = `running, ${seconds} s`;
  }
}

export function requested(f) {
  const call = f.call || {};
  const row = el("div", "tool");
  row.dataset.callId = call.id;
  row.dataset.turnId = f.turn_id;
  row.dataset.state = "requested";
  row.appendChild(el("span", "tool-name", call.name));
  row.appendChild(el("code", "tool-input", json(call.input)));
  row.appendChild(el("span", "tool-state", "requested"));
  row.appendChild(el("div", "tool-result"));
  state.tools.set(call.id, add(row));
  watchRunning(row);
}

function bareRow(name) {
  const row = add(el("div", "tool"));
  row.appendChild(el("span", "tool-name", name));
  row.appendChild(el("span", "tool-state"));
  row.appendChild(el("div", "tool-result"));
  return row;
}

// the row a result is drawn in: its request's, or a new one at the end when rows came after it
function resultRow(row, f) {
  if (row === log.lastElementChild) return row;
  row.querySelector(".tool-state").textContent = "requested (result below)";
  const later = bareRow(f.name || row.querySelector(".tool-name").textContent);
  later.dataset.callId = f.call_id;
  state.tools.set(f.call_id, later);
  return later;
}

export function completed(f) {
  // requested in an earlier generation or page: still show the outcome
  const row = resultRow(state.tools.get(f.call_id) || bareRow(f.name), f);
  row.dataset.state = f.error ? "error" : "completed";
  row.querySelector(".tool-state").textContent = f.error ? "error" : "completed";
  row.querySelector(".tool-result").textContent = f.error ? f.error : json(f.result);
}

// a parked turn's open tool calls wait for the answer, they do not run: no "running, 12 s"
// counting up over "Waiting for an operator to answer" (live or replayed); once answered they
// count again from the answer
export function parkTools(turnId, parked) {
  const from = parked ? "requested" : "parked";
  for (const row of log.querySelectorAll(`.tool[data-state=${from}][data-turn-id="${CSS.escape(turnId)}"]`)) {
    row.dataset.state = parked ? "parked" : "requested";
    const label = row.querySelector(".tool-state");
    if (!label.textContent.includes("result below")) label.textContent = parked ? "waiting for an answer" : "requested";
    if (!parked) watchRunning(row);
  }
}

// the cancel interrupted the turn's tool in flight, or its calls never ran: their result is
// {"cancelled": true} and no action.completed comes
export function cancelTools(turnId) {
  for (const row of log.querySelectorAll(`.tool:is([data-state=requested], [data-state=parked])[data-turn-id="${CSS.escape(turnId)}"]`)) {
    row.dataset.state = "cancelled";
    row.querySelector(".tool-state").textContent = "cancelled";
  }
}
