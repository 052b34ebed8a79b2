// Every reload the chat makes says why (sessionStorage "june:reloads", newest last: a test reads
// the causes). One the page decides by itself (not a click) is refused when the same cause
// reloaded it in the last minute, or after ten in a minute: a page that kept finding a reason to
// reload would otherwise reload forever. A cause names the event number of the switch it
// follows (branches.js), so switching back and forth between two branches (g4, g5, g4 again) is
// followed each time, while a reload that finds the very same state again is refused. `decide`
// is the pure rule (tests/js/chat.test.mjs); `reloadFor` applies it.
export const RELOADS = "june:reloads";
const WINDOW_MS = 60000;
const MAX_AUTOMATIC = 10;

// past: the recorded reloads (anything: storage may hold junk) -> {allow, past: what to record}
export function decide(past, cause, automatic, now) {
  let recent = Array.isArray(past) ? past : [];
  recent = recent.filter((r) => r && now - r.at < WINDOW_MS).slice(-20);
  const auto = recent.filter((r) => r.automatic);
  if (automatic && (auto.length >= MAX_AUTOMATIC || auto.some((r) => r.cause === cause))) return { allow: false, past: recent };
  return { allow: true, past: [...recent, { at: now, cause, automatic }] };
}

let leaving = false;

// reload the page for `cause`, unless the rule refuses it (then `refused()` says so)
export function reloadFor(cause, automatic, refused) {
  if (leaving) return;
  let past = [];
  try {
    past = JSON.parse(sessionStorage.getItem(RELOADS) || "[]");
  } catch {
    past = [];
  }
  const verdict = decide(past, cause, automatic, Date.now());
  if (!verdict.allow) {
    refused();
    return;
  }
  try {
    sessionStorage.setItem(RELOADS, JSON.stringify(verdict.past));
  } catch {
    /* storage full or off: reload anyway */
  }
  leaving = true;
  location.reload();
}
