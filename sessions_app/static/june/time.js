// One format for every time a person reads: "2026-12-06 09:00:05 Europe/Paris" (the date, the
// time on a 24-hour clock, the zone's IANA name), in the reader's zone (the browser's). The
// server writes the same format in the site's zone (the ``june_time`` template filter,
// sessions_app/templatetags/june_time.py) inside <time datetime="…" data-june-time>;
// ``localizeTimes`` rewrites those (and ``data-june-title-at`` titles) into the reader's zone,
// once the page is parsed and again for a part of a page that says it changed ("june:updated").
// An ES module: the chat's modules import `formatTime`; other pages load it for its own sake.

const FIELDS = {
  year: "numeric",
  month: "2-digit",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  hourCycle: "h23",
};

// the reader's zone: the browser's ("UTC" when it names none)
export function readerZone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

// ``at`` (a Date, an ISO string or epoch milliseconds) as "YYYY-MM-DD HH:MM:SS Zone"; ``ms``:
// with milliseconds. "" for something that is no time.
export function formatTime(at, options) {
  const zone = options?.zone || readerZone();
  const date = at instanceof Date ? at : new Date(at);
  if (at === null || at === undefined || at === "" || Number.isNaN(date.getTime())) return "";
  const parts = {};
  for (const p of new Intl.DateTimeFormat("en-CA", { ...FIELDS, timeZone: zone }).formatToParts(date)) {
    parts[p.type] = p.value;
  }
  const fraction = options?.ms ? `.${String(date.getUTCMilliseconds()).padStart(3, "0")}` : "";
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}${fraction} ${zone}`;
}

// the server's times under ``root``, into the reader's zone
export function localizeTimes(root) {
  const scope = root?.querySelectorAll ? root : document;
  for (const node of scope.querySelectorAll("time[data-june-time]")) {
    const text = formatTime(node.getAttribute("datetime"), { ms: node.dataset.juneTime === "ms" });
    if (text) node.textContent = text;
  }
  for (const node of scope.querySelectorAll("[data-june-title-at]")) {
    const text = formatTime(node.dataset.juneTitleAt);
    if (text) node.title = text;
  }
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", () => localizeTimes(document));
} else {
  localizeTimes(document);
}
document.addEventListener("june:updated", (event) => localizeTimes(event.target));
