// Branches on the chat page: an Edit button under each message you sent (Save forks the
// conversation there and sends the edited text), a switcher "‹ 2/3 ›" under a message with
// other branches, and Regenerate under the last reply. The server keeps every branch; this
// script asks it (GET …/branches) whenever the session is idle, and reloads the page when
// another branch becomes live (here or in another tab). Text goes in through textContent only.
import { config } from "./config.js";
import { $, csrf, el, } from "./dom.js";
import { log, showError } from "./log.js";
import { reloadFor } from "./reloads.js";

const badge = $("turn-status");
const conn = $("conn");
const base = config.session_api;
let shown = null;     // the last GET …/branches
let asking = 0;       // the answer of the latest request only is drawn

async function call(method, path, body) {
  const response = await fetch(base + path, {
    method, credentials: "same-origin",
    headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch { /* an empty or broken body: the status says it */ }
  if (!response.ok) throw new Error((data.error?.message) || `HTTP ${response.status}`);
  return data;
}

// no bars while a person answers in the agent's place (takeover.js sets body's data-taken-over):
// an edit or a regenerate starts a turn, which a takeover refuses (409); the banner says why
function idle() {
  return conn.dataset.state === "live" && !["running", "queued", "suspended"].includes(badge.dataset.status)
    && document.body.dataset.takenOver !== "yes";
}

async function refresh() {
  if (!idle()) { clear(); return; }
  // a new chat's session is created by its first message: until one is shown there is no session
  // to ask about (the GET would be a 404, a console error on every new chat)
  if (!log.querySelector(".msg")) { clear(); return; }
  const mine = ++asking;
  try {
    const data = await call("GET", "branches");
    if (mine !== asking) return;
    shown = data;
    if (data.generation !== config.generation) {
      // another branch is live (a switch elsewhere), or this page's reset committed before its
      // session.reset frame (which sets config.generation) got here: reload only if no frame
      // explains it within a moment — a reload would drop the reset's notice
      setTimeout(() => {
        if (data.generation !== config.generation) reloadFor(`g${data.generation} is live at #${data.seq}, this page shows g${config.generation}`, true, refused);
      }, 2000);
      return;
    }
    draw(data);
  } catch { /* a chat whose session does not exist yet, or the server away: nothing to draw */ }
}

// a log scrolled to its newest message stays there when bars come or go (chat.js's add does the same)
function keepingBottom(change) {
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  change();
  if (atBottom) log.scrollTop = log.scrollHeight;
}

function clear() {
  keepingBottom(() => { for (const node of log.querySelectorAll(".branch-bar")) node.remove(); });
}

function draw(data) {
  clear();
  if (idle()) keepingBottom(() => drawBars(data));
}

function drawBars(data) {
  let lastBubble = null, lastTurn = null;
  for (const point of data.openings) {
    const bubble = log.querySelector(`.msg.user[data-turn-id="${CSS.escape(point.turn_id)}"]`);
    if (!bubble) continue;
    const bar = el("div", "branch-bar");
    bar.dataset.index = point.index;
    if (point.alternatives.length > 1) bar.appendChild(switcher(point));
    const edit = el("button", "branch-edit", "Edit");
    edit.type = "button";
    edit.title = "Edit this message: the conversation goes on from here on a new branch (this one stays)";
    edit.addEventListener("click", () => editor(bar, bubble, point.index));
    bar.appendChild(edit);
    bar.appendChild(el("span", "branch-error"));
    bubble.after(bar);
    lastBubble = bubble; lastTurn = point.turn_id;
  }
  if (lastTurn) regenerate(lastBubble, lastTurn);
}

function switcher(point) {
  const at = point.alternatives.indexOf(point.current);
  const box = el("span", "branch-switch");
  const step = (to, label, name) => {
    const button = el("button", null, label);
    button.type = "button";
    button.setAttribute("aria-label", name);
    button.disabled = to < 0 || to >= point.alternatives.length;
    button.addEventListener("click", () => go(() => call("POST", `branches/${point.alternatives[to]}/switch`), box));
    return button;
  };
  box.appendChild(step(at - 1, "‹", "Previous branch"));
  box.appendChild(el("span", "branch-count", `${at + 1}/${point.alternatives.length}`));
  box.appendChild(step(at + 1, "›", "Next branch"));
  return box;
}

// Regenerate under the last reply (or under the last message, when it has no reply)
function regenerate(lastBubble, turnId) {
  const after = lastBubble.nextElementSibling;
  let reply = null;
  for (let node = after; node; node = node.nextElementSibling) {
    if (node.matches(".msg.user, .msg.trigger")) break;
    if (node.matches(".msg.assistant")) reply = node;
  }
  const bar = reply ? el("div", "branch-bar branch-regen") : lastBubble.nextElementSibling;
  const button = el("button", "branch-regenerate", "Regenerate");
  button.type = "button";
  button.title = "Send the last message again for a new reply (this reply stays, on its branch)";
  button.addEventListener("click", () => go(() => call("POST", `turns/${encodeURIComponent(turnId)}/regenerate`), bar));
  bar.appendChild(button);
  if (reply) { bar.appendChild(el("span", "branch-error")); reply.after(bar); }
}

function editor(bar, bubble, index) {
  bar.replaceChildren();
  const box = el("textarea", "branch-text");
  // the message's own text: not the names of its attachments (attachments.js draws them inside)
  box.value = [...bubble.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent).join("");
  box.rows = 3;
  box.setAttribute("aria-label", "Edited message");
  const save = el("button", "primary branch-save", "Save and send");
  save.type = "button";
  const cancel = el("button", "branch-cancel", "Cancel");
  cancel.type = "button";
  save.addEventListener("click", () => {
    if (!box.value.trim()) { bar.querySelector(".branch-error").textContent = "The message is empty."; return; }
    go(() => call("POST", `messages/${index}/fork`, { text: box.value }), bar);
  });
  // Cancel (or Escape in the box) closes the editor; the cursor goes back to this message's Edit
  const close = () => {
    if (shown) draw(shown);
    const again = log.querySelector(`.branch-bar[data-index="${index}"] .branch-edit`);
    if (again) again.focus();
  };
  cancel.addEventListener("click", close);
  box.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.preventDefault(); close(); } });
  bar.append(box, save, cancel, el("span", "branch-error"));
  if (bubble.querySelector(".attachments")) {  // regenerate re-sends them; an edit sends the text
    bar.insertBefore(el("span", "hint", "The edited message is sent without the files of the original."), save);
  }
  box.focus();
}

// a fork or a switch made another branch live: the page shows it from the start
async function go(request, where) {
  for (const b of where.querySelectorAll("button")) b.disabled = true;
  try {
    await request();
    reloadFor("a fork or a switch from this page", false, refused);
  } catch (e) {
    for (const b of where.querySelectorAll("button")) b.disabled = false;
    const box = where.querySelector(".branch-error") || where.closest(".branch-bar")?.querySelector(".branch-error");
    if (box) box.textContent = e.message;
  }
}

// the page refuses a reload it decided by itself too often (reloads.js)
const refused = () => showError("Another branch of this conversation is live; reload the page to see it.");

// another tab (or the API) made another branch live: show it. Only a live event counts: the
// replay this page opened with may hold a branch.switched or session.reset copied from another
// branch (a fork copies its history), which says nothing about what is live now.
export function wireBranches() {
  log.addEventListener("june:frame", (ev) => {
    const f = ev.detail;
    if (!f.live) return;
    if (f.type === "session.reset") config.generation = f.generation;  // the page shows the new one
    if (f.type === "branch.switched" && f.generation !== config.generation) reloadFor(`branch.switched to g${f.generation} at #${f.seq}`, true, refused);
  });
  let timer = null;
  const soon = () => { clearTimeout(timer); timer = setTimeout(refresh, 150); };
  new MutationObserver(soon).observe(badge, { attributes: true, attributeFilter: ["data-status"] });
  new MutationObserver(soon).observe(conn, { attributes: true, attributeFilter: ["data-state"] });
  new MutationObserver(soon).observe(document.body, { attributes: true, attributeFilter: ["data-taken-over"] });
}
