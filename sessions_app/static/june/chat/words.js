// What the chat says, as pure functions of the frames (unit-tested in tests/js/chat.test.mjs).
import { json } from "./dom.js";

// the words for a status, the same in the header, on a message, in the session list
// (selectors.STATUS_WORDS) and in the admin
export const TAGS = { running: "running", suspended: "waiting for an answer", failed: "failed", cancelled: "cancelled", queued: "queued" };
// why a turn was cancelled, when it was not the user's own Cancel
export const CANCEL_REASONS = { requested: "", replaced: " (replaced by a newer message)", reset: " (the session was reset)", parent: " (the turn that started it was cancelled)" };

// an answered card's outcome: approved, denied, edited, rejected or answered
export function outcome(answer) {
  const d = answer?.decision;
  if (answer === true || d === "approve") return "approved";
  if (answer === false) return "denied";
  return d === "edit" ? "edited" : d === "reject" ? "rejected" : "answered";
}

// "Approved by olga over the API."
export function outcomeText(f) {
  const who = f.name || (f.by ? `user ${f.by}` : "someone");
  const via = f.via === "admin" ? " in the admin inbox" : f.via === "api" ? " over the API" : "";
  if (f.answer === true) return `Approved by ${who}${via}.`;
  if (f.answer === false) return `Denied by ${who}${via}.`;
  if (f.answer === undefined || f.answer === null) return `Answered by ${who}${via}.`;
  const d = f.answer?.decision; // a declared approval of a tool call
  if (d === "approve") return `Approved by ${who}${via}.`;
  if (d === "edit") return `Edited and approved by ${who}${via}: ${json(f.answer.input)}`;
  if (d === "reject") return `Rejected by ${who}${via}${f.answer.message ? `: ${f.answer.message}` : "."}`;
  return `Answered by ${who}${via}: ${json(f.answer)}`;
}

// the first message titles an untitled session, as the server does (selectors.title_from)
export function titleOf(text) {
  const line = String(text).split(/\s+/).filter(Boolean).join(" ");
  if (line.length <= 60) return line;
  return `${line.slice(0, 59).replace(/\s+\S*$/, "") || line.slice(0, 59)}…`;
}

// how a turn ended, when it was cancelled
export function cancelledText(queuedText, reason) {
  const why = CANCEL_REASONS[reason] || "";
  return queuedText !== null ? `Queued message cancelled${why}: “${queuedText}”` : `Turn cancelled${why}.`;
}

export const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
