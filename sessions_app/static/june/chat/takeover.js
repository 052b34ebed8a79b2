// A person answering in the agent's place (docs/operations.md "Takeover"): the frames the
// chat itself does not draw reach this module as "june:frame" events on the log.
// takeover.started / takeover.ended say a person is (no longer) answering; person.message is a
// message written meanwhile: the user's own, or the person's (shown with their name).
import { $ } from "./dom.js";
import { log } from "./log.js";

function line(cls, text) {
  const node = document.createElement("div");
  node.className = cls;
  node.textContent = text;
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  log.appendChild(node);
  if (atBottom) log.scrollTop = log.scrollHeight;
  return node;
}
// files go to the assistant (the model reads them), not to the person: while a person answers,
// the Attach button is off and says why (attachments.js refuses a paste or a drop likewise)
const FILES_LATER = "Files go to the assistant: attach them once the conversation is handed back.";
const attach = $("attach");
const attachTitle = attach ? attach.title : "";
function answering(name) {
  const notice = $("notice");
  document.body.dataset.takenOver = name ? "yes" : "";
  if (attach) {
    attach.disabled = !!name;
    attach.title = name ? FILES_LATER : attachTitle;
  }
  if (!notice) return;
  if (name) {
    notice.textContent = `A person, ${name}, is answering you now. ${FILES_LATER}`;
    notice.dataset.takeover = "yes";
    notice.hidden = false;
  } else if (notice.dataset.takeover) {
    delete notice.dataset.takeover;
    notice.textContent = "";
    notice.hidden = true;
  }
}

const FRAMES = {
  "takeover.started": (f) => {
    line("note takeover", `${f.by} (a person) has joined the conversation.`);
    answering(f.by);
  },
  "takeover.ended": (f) => {
    line("note takeover", `${f.by} handed the conversation back to the assistant.`);
    answering("");
  },
  "person.message": (f) => {
    if (f.role === "person") {
      const bubble = line("msg person", f.text);
      bubble.dataset.by = f.by;
      bubble.setAttribute("aria-label", `${f.by} (a person) wrote`);
    } else {
      line("msg user", f.text);
    }
  },
  "session.reset": () => answering(""),
};

export function wireTakeover() {
  log.addEventListener("june:frame", (ev) => {
    const f = ev.detail || {};
    const handler = FRAMES[f.type];
    if (handler) handler(f);
  });
}
