// Subagents in the chat (docs/subagents.md): each child turn a tool call spawned is a box nested
// under that tool call, with its own streaming text, tool calls and approval cards, live and after
// a reload. The socket sends `child.event` / `child.delta` frames (sessions_app/web/children.py);
// the chat (handlers.js) hands every frame type it does not draw to this module as a `june:frame`
// DOM event on the log.
// Every piece of text goes into the page through textContent, never as HTML.
import { config } from "./config.js";  // api_base: June's mount
import { csrf, el, json } from "./dom.js";
import { log } from "./log.js";

const boxes = new Map();  // child turn id -> {node, body, seq, stream, status}

// The tool-call row the child belongs under: in the log (a child of this session's turn) or in
// its parent child's box (a grandchild).
function hostFor(ref) {
  const parent = boxes.get(ref.parent_turn);
  const scope = parent ? parent.body : log;
  const rows = Array.from(scope.querySelectorAll(".tool")).filter(
    (r) => r.dataset.callId === ref.call_id && r.parentElement === scope);
  const row = rows[rows.length - 1];
  if (!row) return scope;
  let kids = row.querySelector(":scope > .children");
  if (!kids) { kids = el("div", "children"); row.appendChild(kids); }
  return kids;
}

function box(ref) {
  let b = boxes.get(ref.turn_id);
  if (b) return b;
  const node = el("div", "child");
  node.dataset.childTurn = ref.turn_id;
  node.dataset.status = "queued";
  const head = el("div", "child-head");
  head.appendChild(el("span", "child-agent", ref.agent));
  head.appendChild(el("span", "child-goal", ref.goal));
  const badge = el("span", "badge child-status", "queued");
  head.appendChild(badge);
  const body = el("div", "child-body");
  node.appendChild(head);
  node.appendChild(body);
  hostFor(ref).appendChild(node);
  b = { ref, node, body, badge, seq: 0, stream: null, tools: new Map() };
  boxes.set(ref.turn_id, b);
  return b;
}

function setStatus(b, status) {
  b.node.dataset.status = status;
  b.badge.dataset.status = status;
  b.badge.textContent = status === "suspended" ? "waiting for an answer" : status;
}

function streamEl(b) {
  if (!b.stream) { b.stream = { text: "", el: el("div", "msg assistant streaming") }; b.body.appendChild(b.stream.el); }
  return b.stream;
}

const EVENTS = {
  "turn.started": (b) => setStatus(b, "running"),
  "message.completed": (b, e) => {
    const s = b.stream;
    b.stream = null;
    if (!e.text) { if (s) s.el.remove(); return; }
    const bubble = s ? s.el : b.body.appendChild(el("div", "msg assistant"));
    bubble.classList.remove("streaming");
    bubble.textContent = e.text;
  },
  "action.requested": (b, e) => {
    const call = e.call || {};
    const row = el("div", "tool");
    row.dataset.callId = call.id;
    row.dataset.state = "requested";
    row.appendChild(el("span", "tool-name", call.name));
    row.appendChild(el("code", "tool-input", json(call.input)));
    row.appendChild(el("span", "tool-state", "requested"));
    row.appendChild(el("div", "tool-result"));
    b.tools.set(call.id, b.body.appendChild(row));
  },
  "action.completed": (b, e) => {
    const row = b.tools.get(e.call_id);
    if (!row) return;
    row.dataset.state = e.error ? "error" : "completed";
    row.querySelector(".tool-state").textContent = e.error ? "error" : "completed";
    row.querySelector(".tool-result").textContent = e.error ? e.error : json(e.result);
  },
  "input.requested": (b, e) => {
    setStatus(b, "suspended");
    const req = e.request || {};
    const card = el("div", "approval card child-approval");
    card.dataset.inputId = req.id;
    card.dataset.state = "open";
    card.appendChild(el("div", "approval-title", `Approval needed (${b.ref.agent})`));
    card.appendChild(el("p", "approval-prompt", req.prompt));
    const form = el("div", "answer");
    const answer = (value) => resume(b, req.id, value, card);
    if (req.schema?.type === "boolean") {
      const yes = el("button", "primary", "Approve"); yes.type = "button"; yes.onclick = () => answer(true);
      const no = el("button", "", "Deny"); no.type = "button"; no.onclick = () => answer(false);
      form.appendChild(yes); form.appendChild(no);
    } else {
      const input = el("input"); input.placeholder = "answer (JSON)";
      const go = el("button", "primary", "Answer"); go.type = "button";
      go.onclick = () => { let v; try { v = JSON.parse(input.value); } catch { v = input.value; } answer(v); };
      form.appendChild(input); form.appendChild(go);
    }
    card.appendChild(form);
    card.appendChild(el("p", "hint", "Operators can also answer it in the admin inbox."));
    card.appendChild(el("p", "card-error"));
    card.appendChild(el("p", "approval-outcome"));
    b.card = card;
    b.body.appendChild(card);
  },
  "input.answered": (b, e) => {
    if (b.card) {
      // its buttons go disabled: the cursor goes back to the message box, not <body>
      if (b.card.contains(document.activeElement)) document.getElementById("text")?.focus();
      b.card.dataset.state = "answered";
      b.card.querySelector(".approval-outcome").textContent = `Answered${e.name || e.by ? ` by ${e.name || e.by}` : ""}.`;
      b.card.querySelectorAll("button, input").forEach((x) => { x.disabled = true; });
    }
    setStatus(b, "queued");
  },
  "turn.completed": (b) => { endStream(b); setStatus(b, "completed"); },
  "turn.failed": (b, e) => {
    endStream(b);
    b.body.appendChild(el("div", "note error", `Failed: ${e.error}`));
    setStatus(b, "failed");
  },
  "turn.cancelled": (b) => { endStream(b); setStatus(b, "cancelled"); },
};

function endStream(b) {
  if (b.stream) { b.stream.el.classList.remove("streaming"); b.stream = null; }
}

async function resume(b, inputId, value, card) {
  card.dataset.state = "sending";
  const base = (config.api_base || "/api/");
  const url = `${base}agents/${encodeURIComponent(b.ref.agent)}/sessions/${encodeURIComponent(b.ref.session)}` +
    `/turns/${encodeURIComponent(b.ref.turn_id)}/resume`;
  try {
    const r = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: JSON.stringify({ input_id: inputId, answer: value }),
    });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      card.dataset.state = "open";
      card.querySelector(".card-error").textContent = body.error?.message || `HTTP ${r.status}`;
      return;
    }
    card.dataset.state = "sent";
  } catch (x) {
    card.dataset.state = "open";
    card.querySelector(".card-error").textContent = String(x);
  }
}

export function wireChildren() {
  log.addEventListener("june:frame", (ev) => {
    const f = ev.detail || {};
    if (f.type === "child.event" && f.child && f.event) {
      const b = box(f.child);
      if (typeof f.event.seq === "number") {
        if (f.event.seq <= b.seq) return;  // a child's log is replayed on every connect
        b.seq = f.event.seq;
      }
      const handler = EVENTS[f.event.type];
      if (handler) handler(b, f.event);
    } else if (f.type === "child.delta" && f.child && f.event) {
      if (f.event.type !== "message.delta") return;
      const b = box(f.child);
      const s = streamEl(b);
      const offset = f.event.offset || 0;
      if (offset > s.text.length) return;
      const text = s.text.slice(0, offset) + f.event.text;
      if (text.length >= s.text.length) { s.text = text; s.el.textContent = text; }
      if (b.node.dataset.status === "queued") setStatus(b, "running");
    } else if (f.type === "session.reset") {
      boxes.clear();
    }
  });
}
