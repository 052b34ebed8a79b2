// Attachments in the chat: the composer's attach button, paste and drop upload files (fetch to
// …/attachments, with the CSRF header) and show them as chips with a remove ×; the composer sends
// the chips' ids with the start frame (`ids`, `sent`) and the log draws a message's attachments
// with `render`. Names go in through textContent; thumbnails load from the owner-checked download URL.
import { config } from "./config.js";
import { $, csrf } from "./dom.js";

const base = config.attachments_url;
const maxBytes = config.attachment_max_bytes || 5 * 1024 * 1024;
const maxCount = config.attachments_per_message || 5;
const chips = new Map(); // id -> chip element (uploaded, not sent yet)
let uploading = 0;

function size(n) {
  return n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1048576).toFixed(1)} MB`;
}
function say(text) {
  const box = $("composer-error");
  box.textContent = text || "";
  box.hidden = !text;
}
// the box's text is required only without files: files alone make a message
function sync() {
  $("text").required = chips.size === 0;
}
function url(id) {
  return `${base}/${encodeURIComponent(id)}`;
}

function chip(label) {
  const node = document.createElement("span");
  node.className = "attach-chip";
  node.dataset.state = "uploading";
  const name = document.createElement("span");
  name.className = "attach-name";
  name.textContent = label;
  node.appendChild(name);
  $("attach-chips").appendChild(node);
  return node;
}
function ready(node, meta) {
  node.dataset.state = "ready";
  node.dataset.id = meta.id;
  node.querySelector(".attach-name").textContent = `${meta.name} (${size(meta.size)}${meta.pages ? `, ${meta.pages} p.` : ""})`;
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "attach-remove";
  remove.textContent = "×";
  remove.setAttribute("aria-label", `Remove ${meta.name}`);
  remove.addEventListener("click", () => {
    chips.delete(meta.id);
    node.remove();
    sync();
    fetch(url(meta.id), { method: "DELETE", credentials: "same-origin", headers: { "X-CSRFToken": csrf() } });
  });
  node.appendChild(remove);
  chips.set(meta.id, node);
  sync();
}

async function upload(file) {
  if (chips.size + uploading >= maxCount) { say(`Not attached: at most ${maxCount} files per message.`); return; }
  if (file.size > maxBytes) { say(`Not attached: ${file.name} is ${size(file.size)}; the limit is ${size(maxBytes)}.`); return; }
  say("");
  const node = chip(file.name);
  uploading += 1;
  const body = new FormData();
  body.append("file", file, file.name);
  try {
    const response = await fetch(base, { method: "POST", body: body, credentials: "same-origin",
                                         headers: { "X-CSRFToken": csrf(), Accept: "application/json" } });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error((data.error?.message) || `upload failed (${response.status})`);
    ready(node, data);
  } catch (err) {
    node.remove();
    say(`Not attached: ${file.name}: ${err.message}`);
  } finally {
    uploading -= 1;
  }
}
function take(files) {
  for (const file of files) upload(file);
}

// a page with a folded corner, as inline SVG (drawn in the text's colour)
const SVG = "http://www.w3.org/2000/svg";
function documentIcon() {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "doc-icon");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "14");
  svg.setAttribute("height", "14");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", "M3.5 1.5h6l3 3v10h-9z M9.5 1.5v3h3 M5.5 8h5 M5.5 10.5h5 M5.5 13h3");
  path.setAttribute("fill", "none");
  path.setAttribute("stroke", "currentColor");
  path.setAttribute("stroke-width", "1.2");
  svg.appendChild(path);
  return svg;
}

// a message's attachments: image thumbnails (linking to the file) and PDF links
export function render(bubble, list) {
  if (!list?.length) return;
  const box = document.createElement("div");
  box.className = "attachments";
  for (const meta of list) {
    const link = document.createElement("a");
    link.href = url(meta.id);
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.className = "attachment";
    link.title = `${meta.name} (${meta.type}, ${size(meta.size)})`;
    if (/^image\//.test(meta.type)) {
      const img = document.createElement("img");
      img.src = url(meta.id);
      img.alt = meta.name;
      img.loading = "lazy";
      link.appendChild(img);
    } else {
      // an icon shipped with the page (an emoji was a box where no emoji font is installed)
      link.appendChild(documentIcon());
      link.appendChild(document.createTextNode(`${meta.name}${meta.pages ? ` (${meta.pages} pages)` : ""}`));
    }
    box.appendChild(link);
  }
  bubble.appendChild(box);
}

export function wireAttachments() {
  const input = $("attach-input");
  if (!input) return;
  $("attach").addEventListener("click", () => input.click());
  input.addEventListener("change", () => { take([...input.files]); input.value = ""; });
  $("text").addEventListener("paste", (ev) => {
    const files = [...(ev.clipboardData ? ev.clipboardData.files : [])];
    if (files.length) { ev.preventDefault(); take(files); }
  });
  const composer = $("composer");
  composer.addEventListener("dragover", (ev) => { ev.preventDefault(); composer.dataset.drop = "yes"; });
  composer.addEventListener("dragleave", () => { delete composer.dataset.drop; });
  composer.addEventListener("drop", (ev) => {
    ev.preventDefault();
    delete composer.dataset.drop;
    take([...(ev.dataTransfer ? ev.dataTransfer.files : [])]);
  });
}

export const ids = () => [...chips.keys()];
export const busy = () => uploading > 0;
// the server took these ids with a message: their chips go
export function sent(list) {
  for (const id of list || []) {
    const n = chips.get(id);
    if (n) n.remove();
    chips.delete(id);
  }
  sync();
}
