// A person answering in the agent's place (docs/operations.md "Takeover"): the frames the
// chat itself does not draw reach this module as "june:frame" events on the log.
// takeover.started / takeover.ended say a person is (no longer) answering; person.message is a
// message written meanwhile: the user's own, or the person's (shown with their name).
import { render as renderAttachments } from "./attachments.js";
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
function answering(name) {
  const notice = $("notice");
  document.body.dataset.takenOver = name ? "yes" : "";
  if (!notice) return;
  if (name) {
    notice.textContent = `A person, ${name}, is answering you now: your messages and files go to them. `
      + "Edit and Regenerate come back when they hand the conversation back to the assistant.";
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
      renderAttachments(line("msg user", f.text), f.attachments); // files go to the person as text does
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
