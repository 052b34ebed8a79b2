// The chat page (the one script its template loads, as an ES module; no build step): one
// websocket per session (the replay of the event log, then live events), a composer,
// cancel/reset, the tool timeline, approval cards, attachments, subagents, branches and a
// person's takeover. Each role is a module of this folder; they share the page's state through
// state.js and hear the frames the chat does not draw as "june:frame" events on the log — never
// through globals. Every piece of user or model text goes into the page through textContent,
// never as HTML (a reply's Markdown: sanitized, markdown.js).
import { wireToRequest } from "./approvals.js";
import { wireAttachments } from "./attachments.js";
import { wireBranches } from "./branches.js";
import { wireChildren } from "./children.js";
import * as composer from "./composer.js";
import { connect, send } from "./connection.js";
import { $ } from "./dom.js";
import { onFrame } from "./handlers.js";
import { follow } from "./log.js";
import { state } from "./state.js";
import { keepOnLeave } from "./stream.js";
import { wireTakeover } from "./takeover.js";
import { sendCancel } from "./turns.js";

function cancelCurrent() {
  if (state.currentTurn) sendCancel(state.currentTurn);
}

function wireControls() {
  // the button goes disabled when the turn ends: the cursor goes back to the message box, not <body>
  $("cancel").addEventListener("click", () => {
    cancelCurrent();
    $("text").focus();
  });
  // Escape: in the message box, cancels the running turn (as Cancel does); in an approval card,
  // goes back to the message box; in the rename box, closes it (branches.js: closes an edit)
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape" || ev.defaultPrevented || !(ev.target instanceof Element)) return;
    const rename = ev.target.closest("details.rename");
    if (rename) {
      rename.open = false;
      rename.querySelector("summary").focus();
      ev.preventDefault();
      return;
    }
    if (ev.target.closest(".approval")) {
      $("text").focus();
      ev.preventDefault();
      return;
    }
    if (ev.target === $("text") && state.currentTurn && state.turnStatus.get(state.currentTurn) === "running") {
      cancelCurrent();
      ev.preventDefault();
    }
  });
  $("reset").addEventListener("click", () => {
    if (confirm("Reset this session? Its messages are archived and the conversation starts over.")) send({ type: "reset" });
  });
}

follow();
wireControls();
wireToRequest();
composer.wireComposer();
wireAttachments();
keepOnLeave();
// the controls that hear "june:frame" listen before the first frame comes
wireChildren();
wireBranches();
wireTakeover();
connect(onFrame, composer.dropped);
