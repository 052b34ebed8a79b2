// Approval cards: a form built from the request's JSON schema (or a declared tool approval's
// tool and input), who may answer decided before the buttons show, and the outcome.
import { config } from "./config.js";
import { send } from "./connection.js";
import { $, el, json } from "./dom.js";
import { add } from "./log.js";
import { state } from "./state.js";
import { outcome, outcomeText } from "./words.js";

export function openRequest() {
  return [...state.cards.values()].find((c) => c.dataset.state === "open" && c.dataset.answerable === "yes") || null;
}

export function showToRequest() {
  $("to-request").hidden = !openRequest();
}

// the open request a person may answer, one Tab from the message box (the log's controls grow
// with every message)
export function wireToRequest() {
  $("to-request").addEventListener("click", () => {
    const card = openRequest();
    const control = card?.querySelector("form.answer:not([hidden]) :is(button, input, textarea, select):not(:disabled)");
    if (!control) return;
    card.scrollIntoView({ block: "nearest" });
    control.focus();
  });
}

function cardError(form, text) {
  form.parentNode.querySelector(".card-error").textContent = text;
}

function button(cls, label, type = "button") {
  const b = el("button", cls, label);
  b.type = type;
  return b;
}

function answerForm(schema, submit) {
  const form = el("form", "answer");
  if (schema.type === "boolean") {
    const yes = button("primary", "Approve");
    const no = button("danger", "Deny");
    yes.addEventListener("click", () => submit(true));
    no.addEventListener("click", () => submit(false));
    form.append(yes, no);
    return form;
  }
  const read = schema.type === "object" ? objectFields(form, schema) : field(form, "answer", schema, "Answer");
  form.appendChild(button("primary", "Send answer", "submit"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    try {
      submit(read());
    } catch (e) {
      cardError(form, e.message);
    }
  });
  return form;
}

// a declared approval of a tool call (docs/approvals.md): the tool and its input, editable;
// approve runs it as proposed, "Run edited" as written here, reject never runs it
function toolApprovalForm(req, submit) {
  const form = el("form", "answer tool-approval");
  form.appendChild(el("div", "approval-tool", `Tool: ${req.tool}`));
  const proposed = JSON.stringify(req.input || {}, null, 2);
  const input = el("textarea", "approval-input");
  input.name = "input";
  input.rows = Math.min(12, proposed.split("\n").length + 1);
  input.value = proposed;
  input.setAttribute("aria-label", "The tool's input (edit it to run it differently)");
  const message = el("input", "approval-message");
  message.name = "message";
  message.placeholder = "A note for the agent (with Reject)";
  message.setAttribute("aria-label", "A note for the agent");
  const approve = button("primary", "Approve");
  const edited = button(null, "Run edited");
  const reject = button("danger", "Reject");
  approve.addEventListener("click", () => submit({ decision: "approve" }));
  edited.addEventListener("click", () => {
    let value;
    try {
      value = JSON.parse(input.value);
    } catch {
      cardError(form, "The input is not valid JSON.");
      return;
    }
    submit({ decision: "edit", input: value });
  });
  reject.addEventListener("click", () => submit({ decision: "reject", message: message.value.slice(0, 2000) }));
  form.append(input, message, approve, edited, reject);
  return form;
}

function objectFields(form, schema) {
  const readers = {};
  for (const [name, prop] of Object.entries(schema.properties || {})) readers[name] = field(form, name, prop, prop.title || name);
  return () => {
    const value = {};
    for (const [name, read] of Object.entries(readers)) {
      const v = read();
      if (v !== undefined) value[name] = v;
    }
    return value;
  };
}

function field(form, name, schema, labelText) {
  const label = el("label", "field", labelText);
  let input;
  if (Array.isArray(schema.enum)) {
    input = el("select");
    for (const option of schema.enum) {
      const o = el("option", null, option);
      o.value = json(option);
      input.appendChild(o);
    }
  } else if (schema.type === "boolean") {
    input = el("input");
    input.type = "checkbox";
  } else {
    input = el("input");
    input.type = schema.type === "number" || schema.type === "integer" ? "number" : "text";
    if (schema.type === "integer") input.step = "1";
    if (schema.type === "number") input.step = "any";
  }
  input.name = name;
  label.appendChild(input);
  form.appendChild(label);
  return () => {
    if (input.tagName === "SELECT") return JSON.parse(input.value);
    if (input.type === "checkbox") return input.checked;
    if (input.type === "number") {
      if (input.value === "") throw new Error(`${labelText}: a number is required`);
      return Number(input.value);
    }
    return input.value;
  };
}

function setAnswerable(card, may, why) {
  card.dataset.answerable = may ? "yes" : "no";
  const form = card.querySelector("form.answer");
  if (form) form.hidden = !may;
  card.querySelector(".approval-waiting").textContent = may ? "" : why;
  showToRequest();
}

function initAnswerable(card, who) {
  if (who.user !== undefined && who.user !== null) {
    const mine = String(who.user) === String(config.user_id);
    setAnswerable(card, mine, "Waiting for the user this request names to answer.");
  } else if (who.policy) {
    setAnswerable(card, false, "Checking who may answer…");
    card.dataset.answerable = "checking";
    showToRequest();
    if (state.ready) refreshAnswerable();
  } else {
    setAnswerable(card, true, "");
  }
}

// the server decides a policy (the agent's authorize_answer): ask it for the open cards
export function refreshAnswerable() {
  const open = [...state.cards.values()].filter((c) => c.dataset.state !== "answered" && c.dataset.answerers === "policy");
  if (!open.length) return;
  fetch(config.pending_url, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((body) => {
      const may = new Map((body.pending || []).map((p) => [`${p.turn_id}:${p.request?.id}`, p.may_answer]));
      for (const [key, card] of state.cards) {
        if (card.dataset.answerers !== "policy" || card.dataset.state === "answered") continue;
        const policy = card.querySelector(".hint") ? "an operator" : "someone allowed";
        setAnswerable(card, may.get(key) === true, `Waiting for ${policy} to answer. The outcome will appear here.`);
      }
    })
    .catch(() => {
      for (const card of open) setAnswerable(card, true, ""); // let the server refuse, with its reason
    });
}

// input.requested: the card
export function requestCard(f) {
  const req = f.request || {};
  const card = el("div", "approval card");
  card.dataset.inputId = req.id;
  card.dataset.state = "open";
  card.appendChild(el("div", "approval-title", "Approval needed"));
  card.appendChild(el("p", "approval-prompt", req.prompt));
  const who = req.answerers || {};
  card.dataset.turnId = f.turn_id;
  card.dataset.answerers = who.policy ? "policy" : who.user ? "user" : "owner";
  // the policy's scope is the server's business (it decides, via …/pending's may_answer)
  if (who.policy) card.appendChild(el("p", "hint", "Operators can answer it in the admin inbox."));
  card.appendChild(el("p", "approval-waiting"));
  const submit = (answer) => {
    card.querySelector(".card-error").textContent = "";
    if (send({ type: "resume", turn_id: f.turn_id, input_id: req.id, answer }, card)) card.dataset.state = "sending";
  };
  card.appendChild(req.kind === "tool_approval" ? toolApprovalForm(req, submit) : answerForm(req.schema || {}, submit));
  card.appendChild(el("p", "card-error"));
  card.appendChild(el("p", "approval-outcome"));
  state.cards.set(`${f.turn_id}:${req.id}`, add(card));
  initAnswerable(card, who);
}

// input.answered: the card says who answered how; true when the turn waits for another answer
// (a step's parallel calls each ask: the turn goes on only after the last answer)
export function answered(f) {
  const card = state.cards.get(`${f.turn_id}:${f.input_id}`);
  if (card) {
    // its buttons go disabled: the cursor goes back to the message box, not <body>
    if (card.contains(document.activeElement)) $("text").focus();
    card.dataset.state = "answered";
    card.querySelector(".approval-outcome").textContent = outcomeText(f);
    card.dataset.outcome = outcome(f.answer);
    card.querySelector(".approval-waiting").textContent = "";
    card.querySelector(".card-error").textContent = ""; // a refusal of this tab's late answer, say
    for (const b of card.querySelectorAll("button, input, select, textarea")) b.disabled = true;
  }
  return [...state.cards.entries()].some(([k, c]) => k.startsWith(`${f.turn_id}:`) && c.dataset.state !== "answered");
}
