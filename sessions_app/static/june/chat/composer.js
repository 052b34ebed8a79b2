// The composer: the text stays in the box until the server accepts it. A refusal (a rate limit
// counts down to when sending works again), a dropped socket or a text too long says why right
// under the box. Files come from attachments.js.
import * as attachments from "./attachments.js";
import { config } from "./config.js";
import { connected, sendQuiet } from "./connection.js";
import { $ } from "./dom.js";
import { state } from "./state.js";
import { formatTime } from "../time.js";
import { queuedNow } from "./turns.js";
import { plural } from "./words.js";

let limitTimer = null;

export function composerMessage(text, keepTimer) {
  if (!keepTimer) {
    clearTimeout(limitTimer);
    limitTimer = null;
  }
  const box = $("composer-error");
  delete box.dataset.kind;
  box.textContent = text || "";
  box.hidden = !text;
}

// a rate limit or quota: say when sending again works, count down to it, and clear the message
// then (the text stays in the box). The server's message says what the limit is; the wait is
// its retry_after, said here once.
function limitCountdown(f) {
  const until = Date.now() + f.retry_after * 1000;
  const say = () => {
    const left = Math.ceil((until - Date.now()) / 1000);
    if (left <= 0) {
      composerMessage("");
      return;
    }
    const when = left < 120 ? `in ${left} s` : `at ${formatTime(until)}`;
    composerMessage(`Not sent: ${f.message}. Your message is kept in the box: send it again ${when}.`, true);
    $("composer-error").dataset.kind = "limit";
    limitTimer = setTimeout(say, left < 120 ? 1000 : 30000);
  };
  say();
}

// why a text cannot be sent, or "" (the server refuses the same)
function tooLong(text) {
  const n = text.length.toLocaleString();
  const max = config.max_text_chars || 32000;
  if (text.length > max) return `Not sent: your message has ${n} characters; the limit is ${max.toLocaleString()}. Shorten it and send again.`;
  // a message the agent's model could never read whole (it was accepted, then failed after two compactions)
  if (config.window_chars && text.length > config.window_chars) {
    return `Not sent: your message has ${n} characters and cannot fit the model's context window of ${config.window_tokens.toLocaleString()} tokens (at most ${config.window_chars.toLocaleString()} characters). Shorten it or split it over several messages; it is kept in the box.`;
  }
  return "";
}

function submit() {
  const text = $("text").value;
  const files = attachments.ids();
  if (attachments.busy()) {
    composerMessage("Not sent yet: a file is still uploading. Send again in a moment.");
    return;
  }
  if (!text.trim() && !files.length) return;
  const refusal = tooLong(text);
  if (refusal) {
    composerMessage(refusal);
    return;
  }
  if (!connected()) {
    composerMessage("Not sent: not connected (reconnecting…). Your message is kept; send it again in a moment.");
    $("composer-error").dataset.kind = "offline";
    return;
  }
  const frame = { type: "start", text: text.trim() ? text : "", replace: $("replace").checked };
  if (files.length) frame.attachments = files;
  const id = sendQuiet(frame);
  if (files.length) state.composerFiles.set(id, files);
  state.composerFrames.set(id, text);
  composerMessage("");
  $("composer").dataset.state = "sending";
}

// the ack of a start frame
export function accepted(f) {
  const text = state.composerFrames.get(f.id);
  state.composerFrames.delete(f.id);
  const files = state.composerFiles.get(f.id) || [];
  if (files.length) {
    attachments.sent(files);
    state.composerFiles.delete(f.id);
  }
  if (!state.composerFrames.size) delete $("composer").dataset.state;
  if ($("text").value === text) $("text").value = ""; // text typed meanwhile stays
  $("replace").checked = false;
  if (f.status === "queued" && !state.turnStatus.has(f.turn_id) && text !== undefined) {
    queuedNow(f.turn_id, text.trim() ? text : `(${plural(files.length, "attachment")})`);
  }
  $("text").focus();
}

// an error frame for the composer's message: true when it was (the message stays in the box)
export function refused(f) {
  // an error frame names the frame it answers; a frame too large to parse is answered with id null
  let id = f.id;
  if ((id === null || id === undefined) && state.composerFrames.size) id = state.composerFrames.keys().next().value;
  if (!state.composerFrames.has(id)) return false;
  state.composerFrames.delete(id);
  state.composerFiles.delete(id); // the chips stay: sending again sends them
  if (!state.composerFrames.size) delete $("composer").dataset.state;
  if (f.code === "rate_limited" && f.retry_after) {
    limitCountdown(f);
    return true;
  }
  composerMessage(`Not sent: ${f.message || f.code}. Your message is kept in the box.`);
  return true;
}

// live again: a refusal for being offline no longer holds (the message is still in the box)
export function reconnected() {
  if ($("composer-error").dataset.kind === "offline") composerMessage("");
}

export function dropped() {
  if (!state.composerFrames.size) return;
  state.composerFrames.clear();
  state.composerFiles.clear();
  delete $("composer").dataset.state;
  composerMessage("The connection dropped before the server confirmed your message. It is kept in the box: if it does not appear above once reconnected, send it again.");
}

export function wireComposer() {
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit();
  });
  $("text").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
}
