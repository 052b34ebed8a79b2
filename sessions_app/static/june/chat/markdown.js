// Assistant replies' Markdown: the server's renderer, in the browser. The server
// (sessions_app/markdown.py) renders with markdown-it-py and cleans with nh3; this module renders
// with markdown-it (the JavaScript original markdown-it-py ports; same preset, same options) and
// cleans with DOMPurify under the same allow-list, so `toHtml(text)` is the server's
// `to_html(text)` (tests/browser/test_markdown.py renders one corpus both ways and compares; the
// two libraries are vendored by frontend/vendor.mjs, pinned by frontend/package-lock.json).
// Raw HTML in a reply is text (markdown-it's html: false), links are http, https or mailto.
//
// `fill(bubble, text)` then dresses the clean DOM for the chat (a code block's language and
// copy button, headings under the page's own, a table's alignment as data-align for the
// stylesheet) and re-renders a streaming reply incrementally: the blocks a blank line closed
// are drawn once; only the open tail is drawn again at each delta. A finished reply is drawn
// whole (`final`), exactly as the server would.
import MarkdownIt from "../vendor/markdown-it.js";
import DOMPurify from "../vendor/purify.js";
import { el } from "./dom.js";

export const MAX_CHARS = 200000; // markdown.py's MAX_CHARS

// markdown.py's TAGS and ATTRIBUTES (what nh3 keeps)
const TAGS = ["p", "br", "strong", "em", "code", "pre", "blockquote", "ul", "ol", "li", "a", "hr",
  "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "del"];
const ATTRIBUTES = { A: ["href", "title"], CODE: ["class"], OL: ["start"], TH: ["style"], TD: ["style"] };
const ALIGN = /^text-align:\s*(left|right|center)\s*;?$/;
const SCHEME = /^([a-z][a-z0-9+.-]*):/i;

export const BUDGET = 10000; // markdown.py's BUDGET: rule calls one text's parse may cost
const PARAGRAPHS = /\n[ \t]*\n/;

class OverBudget extends Error {}

// markdown.py's _meter: a rule that matches nothing and counts its calls
function meter(state) {
  state.env.juneCost = (state.env.juneCost || 0) + 1;
  if (state.env.juneCost > BUDGET) throw new OverBudget();
  return false;
}

const parser = new MarkdownIt("commonmark", { html: false, linkify: false, typographer: false }).enable("table");
parser.block.ruler.before("table", "june_meter", meter, { alt: ["paragraph", "reference", "blockquote", "list"] });
parser.inline.ruler.before("text", "june_meter", meter);

// markdown.py's plain_html: the text as written, its paragraphs and line breaks kept, escaped
export function plainHtml(text) {
  return text
    .replace(/\r\n?/g, "\n")
    .split(PARAGRAPHS)
    .map((p) => p.replace(/^[ \t\n]+|[ \t\n]+$/g, ""))
    .filter((p) => p)
    .map((p) => `<p>${parser.utils.escapeHtml(p).replace(/\n/g, "<br>\n")}</p>\n`)
    .join("");
}

// markdown-it's HTML for `text`, before it is cleaned (what markdown-it-py's render gives); the
// text as written when its parse would cost more than BUDGET
export function markdownHtml(text) {
  const source = String(text || "").slice(0, MAX_CHARS);
  try {
    return parser.render(source, {});
  } catch (error) {
    if (error instanceof OverBudget) return plainHtml(source);
    throw error;
  }
}

let purifier = null;
function purify() {
  if (purifier) return purifier;
  purifier = DOMPurify(window);
  purifier.addHook("uponSanitizeAttribute", (node, data) => {
    const allowed = ATTRIBUTES[node.nodeName] || [];
    if (!allowed.includes(data.attrName)) data.keepAttr = false;
    else if (data.attrName === "style") data.keepAttr = ALIGN.test(data.attrValue.trim());
    else if (data.attrName === "href") {
      const scheme = SCHEME.exec(data.attrValue.trim());
      // nh3's url_relative="deny": a relative, empty or "//host" link loses its target too
      data.keepAttr = !!scheme && ["http", "https", "mailto"].includes(scheme[1].toLowerCase());
    }
  });
  purifier.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName === "A") node.setAttribute("rel", "noopener noreferrer");
    // a code block's long line scrolls: the keyboard must reach it (as markdown.py does)
    if (node.nodeName === "PRE") node.setAttribute("tabindex", "0");
  });
  return purifier;
}
const OPTIONS = { ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ["href", "title", "class", "start", "style", "rel", "tabindex"] };

// the server's to_html(text): clean HTML as a string
export function toHtml(text) {
  return purify().sanitize(markdownHtml(text), OPTIONS);
}

// the same, as DOM nodes dressed for the chat
export function render(text) {
  const root = purify().sanitize(markdownHtml(text), { ...OPTIONS, RETURN_DOM_FRAGMENT: true });
  dress(root);
  return root;
}

// the button's words come from CSS (data-label), so a reply's text (textContent) is its own
function copyButton(getText, label) {
  const b = el("button", "copy");
  b.type = "button";
  b.dataset.label = label || "Copy";
  b.setAttribute("aria-label", label || "Copy");
  b.addEventListener("click", () => {
    const done = () => {
      b.dataset.label = "Copied";
      setTimeout(() => {
        b.dataset.label = label || "Copy";
      }, 1200);
    };
    if (navigator.clipboard) navigator.clipboard.writeText(getText()).then(done, () => {});
  });
  return b;
}

const BLOCK_ONLY = new Set(["UL", "OL", "BLOCKQUOTE", "TABLE", "THEAD", "TBODY", "TR"]);
const BLOCKS = new Set([...BLOCK_ONLY, "P", "PRE", "DIV", "HR", "H1", "H2", "H3", "H4", "H5", "H6", "LI"]);
const isBlock = (node) => node !== null && BLOCKS.has(node.nodeName);

// markdown-it's line breaks between blocks are no text of the reply (a bubble's textContent is
// the reply's words): they go; a space between two inline elements stays
function dropSeparators(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const drop = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.data.trim()) continue;
    const parent = node.parentNode;
    if (parent === root || BLOCK_ONLY.has(parent.nodeName) || isBlock(node.previousSibling) || isBlock(node.nextSibling)) drop.push(node);
  }
  for (const node of drop) node.remove();
}

function dress(root) {
  dropSeparators(root);
  for (const code of root.querySelectorAll("pre > code")) {
    const pre = code.parentNode;
    const text = code.textContent.replace(/\n$/, "");
    code.textContent = text;
    const lang = (/(?:^|\s)language-(\S+)/.exec(code.className) || [])[1] || "";
    if (lang) code.dataset.lang = lang;
    const box = el("div", "code-block");
    const head = el("div", "code-head");
    head.appendChild(el("span", "code-lang")).dataset.lang = lang || "text";
    head.appendChild(copyButton(() => text));
    pre.replaceWith(box);
    box.append(head, pre);
  }
  // a reply's headings sit under the page's own (its "#" is an h3)
  for (const h of root.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
    const level = Math.min(6, Number(h.tagName[1]) + 2);
    const to = el(`h${level}`, "md-h");
    to.append(...h.childNodes);
    h.replaceWith(to);
  }
  for (const table of root.querySelectorAll("table")) table.classList.add("md-table");
  for (const cell of root.querySelectorAll("th[style], td[style]")) {
    cell.dataset.align = ALIGN.exec(cell.getAttribute("style").trim())[1];
    cell.removeAttribute("style"); // the stylesheet aligns by data-align
  }
  for (const a of root.querySelectorAll("a[href]")) a.target = "_blank";
}

// Where the closed blocks end: the start of the line after the last blank line outside a fenced
// block. Scans `text` from `from` (a line start outside a fence).
function closedUpTo(text, from) {
  let closed = from;
  let fence = null;
  let start = from;
  while (start < text.length) {
    const end = text.indexOf("\n", start);
    if (end < 0) break; // the last line is open: it may still grow
    const line = text.slice(start, end);
    const trimmed = line.trim();
    if (fence) {
      if (trimmed.startsWith(fence)) fence = null;
    } else {
      const mark = /^ {0,3}(`{3,}|~{3,})/.exec(line);
      if (mark) fence = mark[1];
      else if (!trimmed && !/^\s*$/.test(text.slice(end + 1, end + 2)) && !/^(?: {4}|\t)/.test(text.slice(end + 1, end + 5)))
        closed = end + 1;
    }
    start = end + 1;
  }
  return closed;
}

// a reply's bubble: its Markdown, and a copy button for its raw text. While it streams, called
// again as the text grows: the blocks closed in an earlier call stay as they are
// (bubble.juneMarkdown remembers them); only what follows them is drawn again. `final`: the
// whole text drawn at once, as the server renders it.
export function fill(bubble, text, final) {
  text = String(text || "");
  let kept = bubble.juneMarkdown;
  if (final || !kept || !text.startsWith(kept.closedText) || bubble.childNodes.length < kept.nodes) {
    bubble.replaceChildren();
    kept = { closedText: "", nodes: 0 };
  }
  while (bubble.childNodes.length > kept.nodes) bubble.lastChild.remove(); // the open tail and the button
  const closed = final ? kept.closedText.length : closedUpTo(text, kept.closedText.length);
  if (closed > kept.closedText.length) {
    bubble.appendChild(render(text.slice(kept.closedText.length, closed)));
    kept = { closedText: text.slice(0, closed), nodes: bubble.childNodes.length };
  }
  bubble.appendChild(render(text.slice(closed)));
  bubble.juneMarkdown = kept;
  bubble.dataset.markdown = "yes";
  bubble.appendChild(copyButton(() => text, "Copy reply")).classList.add("copy-reply");
}
