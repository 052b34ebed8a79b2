// Markdown for assistant replies, rendered into DOM nodes: every piece of text goes in through
// textContent, never as HTML, so raw HTML in a model's or a tool's text is shown as text and never
// executed. CommonMark's everyday subset: headings, paragraphs, emphasis, inline code, fenced code
// blocks (the language shown, a copy button), bullet and numbered lists, block quotes, tables
// (GFM, with their columns' alignment), links (http, https and mailto only;
// rel="noopener noreferrer"). The server renders the same subset for the archive and the admin
// (sessions_app/markdown.py).
//
// Any text reaches this file (model output, tool and MCP results): it is parsed by scanners that
// look at each character a bounded number of times — no regular expression runs over the text —
// and nesting is bounded (block quotes MAX_QUOTES deep, inline spans MAX_INLINE), so rendering
// is linear in the text's length. `work()` is the last render's count of steps (the unit tests
// bound it by the text's length). A streamed reply is rendered incrementally: `fill` renders the
// blocks that a blank line has closed once, and re-renders only the open tail at each delta.
// tests/js/markdown.test.mjs (node --test) and tests/browser/test_markdown.py.
"use strict";

window.JuneMarkdown = (function () {
  const { el } = window.JuneDom;  // dom.js
  const MAX_QUOTES = 8;  // deeper `>` are shown as text
  const MAX_INLINE = 4;  // spans inside spans (a link's text, emphasis in strong)
  let steps = 0;

  const isSpace = (c) => c === " " || c === "\t" || c === "\n" || c === "\r" || c === "\f" || c === "\v";
  const isWord = (c) => c !== undefined && ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || (c >= "0" && c <= "9") || c === "_");
  const isDigit = (c) => c >= "0" && c <= "9";

  function safeLink(url) {
    const lower = url.slice(0, 7).toLowerCase();
    return lower.startsWith("http:") || lower.startsWith("https:") || lower.startsWith("mailto:");
  }

  // next[i]: the first index >= i where `test` holds (text.length when none), built right to left
  function nextWhere(text, test) {
    const next = new Int32Array(text.length + 2);
    next[text.length] = next[text.length + 1] = text.length;
    for (let i = text.length - 1; i >= 0; i--) { next[i] = test(text[i]) ? i : next[i + 1]; steps++; }
    return next;
  }

  // backtick runs: for each run start its length, and per length the starts in order, with a cursor
  function backtickRuns(text) {
    const runAt = new Map();
    const byLength = new Map();
    for (let i = 0; i < text.length; i++) {
      steps++;
      if (text[i] !== "`") continue;
      let j = i;
      while (j < text.length && text[j] === "`") { j++; steps++; }
      runAt.set(i, j - i);
      if (!byLength.has(j - i)) byLength.set(j - i, { starts: [], cursor: 0 });
      byLength.get(j - i).starts.push(i);
      i = j - 1;
    }
    return { runAt, byLength };
  }

  // inline: `code`, **bold** / __bold__, *em* / _em_, [text](url) — one pass left to right; each
  // closing delimiter is found through the tables above in constant time
  function inline(parent, text, depth) {
    depth = depth || 0;
    if (depth >= MAX_INLINE || !text) { if (text) parent.appendChild(document.createTextNode(text)); return; }
    const n = text.length;
    let star = null, under = null, bracket = null, paren = null, space = null, ticks = null;
    let plain = 0;  // the start of text not yet emitted
    const emit = (upTo) => { if (upTo > plain) parent.appendChild(document.createTextNode(text.slice(plain, upTo))); };
    let i = 0;
    while (i < n) {
      steps++;
      const c = text[i];
      if (c === "`") {
        ticks = ticks || backtickRuns(text);
        const length = ticks.runAt.get(i);
        if (length === undefined) { i++; continue; }  // inside a run (not reached: runs are skipped whole)
        const same = ticks.byLength.get(length);
        while (same.cursor < same.starts.length && same.starts[same.cursor] <= i) { same.cursor++; steps++; }
        if (same.cursor < same.starts.length) {
          const close = same.starts[same.cursor];
          same.cursor++;
          emit(i);
          parent.appendChild(el("code", null, text.slice(i + length, close).trim()));
          i = plain = close + length;
        } else i += length;  // no closing run of that length: the backticks are text
        continue;
      }
      if (c === "*") {
        star = star || nextWhere(text, (x) => x === "*");
        if (text[i + 1] === "*") {
          const j = star[i + 2];
          if (j > i + 2 && j + 1 < n && text[j + 1] === "*") {
            emit(i); inline(parent.appendChild(el("strong")), text.slice(i + 2, j), depth + 1);
            i = plain = j + 2;
            continue;
          }
        } else if (i + 1 < n && !isSpace(text[i + 1])) {
          const j = star[i + 1];
          if (j < n) {
            emit(i); inline(parent.appendChild(el("em")), text.slice(i + 1, j), depth + 1);
            i = plain = j + 1;
            continue;
          }
        }
        i++;
        continue;
      }
      if (c === "_" && !isWord(text[i - 1])) {
        under = under || nextWhere(text, (x) => x === "_");
        if (text[i + 1] === "_") {
          const j = under[i + 2];
          if (j > i + 2 && text[j + 1] === "_" && !isWord(text[j + 2])) {
            emit(i); inline(parent.appendChild(el("strong")), text.slice(i + 2, j), depth + 1);
            i = plain = j + 2;
            continue;
          }
        } else if (i + 1 < n && !isSpace(text[i + 1])) {
          const j = under[i + 1];
          if (j < n && !isWord(text[j + 1])) {
            emit(i); inline(parent.appendChild(el("em")), text.slice(i + 1, j), depth + 1);
            i = plain = j + 1;
            continue;
          }
        }
        i++;
        continue;
      }
      if (c === "[") {
        bracket = bracket || nextWhere(text, (x) => x === "]");
        const j = bracket[i + 1];
        if (j > i + 1 && text[j + 1] === "(") {
          paren = paren || nextWhere(text, (x) => x === ")");
          space = space || nextWhere(text, isSpace);
          const k = paren[j + 2];
          if (k > j + 2 && k < n && space[j + 2] > k) {
            const url = text.slice(j + 2, k);
            emit(i);
            if (safeLink(url)) {
              const a = el("a");
              a.href = url; a.rel = "noopener noreferrer"; a.target = "_blank";
              inline(a, text.slice(i + 1, j), depth + 1);
              parent.appendChild(a);
            } else parent.appendChild(document.createTextNode(text.slice(i, k + 1)));
            i = plain = k + 1;
            continue;
          }
        }
      }
      i++;
    }
    emit(n);
  }

  // the button's words come from CSS (data-label), so a reply's text (textContent) is its own
  function copyButton(getText, label) {
    const b = el("button", "copy");
    b.type = "button";
    b.dataset.label = label || "Copy";
    b.setAttribute("aria-label", label || "Copy");
    b.addEventListener("click", () => {
      const done = () => { b.dataset.label = "Copied"; setTimeout(() => { b.dataset.label = label || "Copy"; }, 1200); };
      if (navigator.clipboard) navigator.clipboard.writeText(getText()).then(done, () => {});
    });
    return b;
  }

  // -- line scanners (each looks at a line's characters once) ----------------------------------
  function indent(line) { let i = 0; while (i < line.length && (line[i] === " " || line[i] === "\t")) i++; steps += i + 1; return i; }
  function blank(line) { return indent(line) === line.length; }

  // a fence line: ``` or ~~~ (3 or more) and a language word; null otherwise
  function fenceOf(line) {
    let i = indent(line);
    const mark = line[i];
    if (mark !== "`" && mark !== "~") return null;
    const start = i;
    while (line[i] === mark) i++;
    if (i - start < 3) return null;
    const fence = line.slice(start, i);
    while (line[i] === " " || line[i] === "\t") i++;
    const langStart = i;
    while (i < line.length && /* a language name's characters */ (isWord(line[i]) || "+#.-".includes(line[i]))) i++;
    const lang = line.slice(langStart, i);
    while (line[i] === " " || line[i] === "\t") i++;
    steps += line.length;
    return i === line.length ? { fence, lang } : null;
  }

  // "# title" -> {level, text}
  function headingOf(line) {
    let i = 0;
    while (line[i] === "#" && i < 7) i++;
    if (i < 1 || i > 6 || (line[i] !== " " && line[i] !== "\t")) return null;
    let end = line.length;
    while (end > i && isSpace(line[end - 1])) end--;  // a closing "###" goes, with the space before it
    let hashes = end;
    while (hashes > i && line[hashes - 1] === "#") hashes--;
    if (hashes < end && hashes > i && isSpace(line[hashes - 1])) end = hashes;
    steps += line.length;
    return { level: i, text: line.slice(i, end).trim() };
  }

  // "- item", "2. item", "3) item" -> {ordered, number, text}
  function itemOf(line) {
    let i = indent(line);
    const c = line[i];
    let ordered = false, number = 0;
    if (c === "-" || c === "*" || c === "+") i++;
    else {
      const start = i;
      while (isDigit(line[i]) && i - start < 10) i++;
      if (i === start || i - start > 9 || (line[i] !== "." && line[i] !== ")")) return null;
      ordered = true; number = parseInt(line.slice(start, i), 10); i++;
    }
    if (line[i] !== " " && line[i] !== "\t") return null;
    return { ordered, number, text: line.slice(i).trim() };
  }

  // a table's separator row, "|---|:--:|--:|" -> the columns' alignments; null when it is none
  function alignmentsOf(line) {
    let cellsText = line.trim();
    steps += line.length;
    if (cellsText.startsWith("|")) cellsText = cellsText.slice(1);
    if (cellsText.endsWith("|")) cellsText = cellsText.slice(0, -1);
    const out = [];
    for (const raw of cellsText.split("|")) {
      const cell = raw.trim();
      const left = cell.startsWith(":"), right = cell.endsWith(":") && cell.length > 1;
      const dashes = cell.slice(left ? 1 : 0, right ? -1 : undefined);
      if (dashes.length < 3) return null;
      for (const d of dashes) if (d !== "-") return null;
      out.push(left && right ? "center" : right ? "right" : left ? "left" : "");
    }
    return out;
  }

  function cells(line) {
    let row = line.trim();
    steps += line.length;
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|")) row = row.slice(0, -1);
    return row.split("|").map((c) => c.trim());
  }

  // "> text" -> "text"; null for a line that is no quote
  function quoted(line) {
    const i = indent(line);
    if (line[i] !== ">") return null;
    return line.slice(line[i + 1] === " " ? i + 2 : i + 1);
  }

  function tableCell(tag, text, align) {
    const cell = el(tag);
    if (align) cell.dataset.align = align;
    inline(cell, text);
    return cell;
  }

  // blocks of `lines` into `root`; `depth`: the block quotes around them
  function blocks(root, lines, depth) {
    let i = 0;
    let para = [];
    const flush = () => {
      if (para.length) { const p = el("p"); inline(p, para.join(" ")); root.appendChild(p); para = []; }
    };
    while (i < lines.length) {
      steps++;
      const line = lines[i];
      let m;
      if ((m = fenceOf(line))) {  // a fenced code block
        flush();
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(m.fence)) { body.push(lines[i++]); steps++; }
        i++;
        const code = body.join("\n");
        const box = el("div", "code-block");
        const head = el("div", "code-head");
        const tag = head.appendChild(el("span", "code-lang"));
        tag.dataset.lang = m.lang || "text";
        head.appendChild(copyButton(() => code));
        const pre = el("pre");
        pre.tabIndex = 0;  // a long line scrolls: the keyboard must reach it (axe: scrollable-region-focusable)
        const c = el("code", null, code);
        if (m.lang) c.dataset.lang = m.lang;
        pre.appendChild(c);
        box.append(head, pre);
        root.appendChild(box);
        continue;
      }
      if ((m = headingOf(line))) {
        flush();
        const h = el(`h${Math.min(6, m.level + 2)}`, "md-h");
        inline(h, m.text);
        root.appendChild(h);
        i++;
        continue;
      }
      const aligns = line.includes("|") && i + 1 < lines.length ? alignmentsOf(lines[i + 1]) : null;
      if (aligns) {
        flush();
        const table = el("table", "md-table");
        const tr = el("tr");
        cells(line).forEach((c, k) => tr.appendChild(tableCell("th", c, aligns[k])));
        table.appendChild(el("thead")).appendChild(tr);
        const body = table.appendChild(el("tbody"));
        i += 2;
        while (i < lines.length && lines[i].includes("|") && !blank(lines[i])) {
          const row = body.appendChild(el("tr"));
          cells(lines[i]).forEach((c, k) => row.appendChild(tableCell("td", c, aligns[k])));
          i++;
        }
        root.appendChild(table);
        continue;
      }
      if ((m = itemOf(line))) {
        flush();
        const ordered = m.ordered;
        const list = el(ordered ? "ol" : "ul");
        if (ordered && m.number !== 1) list.start = m.number;
        while (i < lines.length && (m = itemOf(lines[i])) && m.ordered === ordered) {
          inline(list.appendChild(el("li")), m.text);
          i++;
        }
        root.appendChild(list);
        continue;
      }
      if (depth < MAX_QUOTES && quoted(line) !== null) {
        flush();
        const quote = [];
        while (i < lines.length && (m = quoted(lines[i])) !== null) { quote.push(m); i++; }
        const q = el("blockquote");
        blocks(q, quote, depth + 1);
        root.appendChild(q);
        continue;
      }
      if (blank(line)) { flush(); i++; continue; }
      para.push(line.trim());
      i++;
    }
    flush();
  }

  function renderInto(text) {
    const root = document.createDocumentFragment();
    blocks(root, String(text || "").split("\n"), 0);
    return root;
  }
  function render(text) {
    steps = 0;
    return renderInto(text);
  }

  // Where the closed blocks end: the start of the line after the last blank line outside a fenced
  // block (a blank line ends every block but a fence, so what is before it renders the same
  // whatever comes after). Scans `text` from `from` (a line start outside a fence).
  function closedUpTo(text, from) {
    let closed = from, fence = null, start = from;
    while (start < text.length) {
      let end = text.indexOf("\n", start);
      if (end < 0) break;  // the last line is open: it may still grow
      const line = text.slice(start, end);
      steps += line.length + 1;
      if (fence) { if (line.trim().startsWith(fence)) fence = null; }
      else {
        const f = fenceOf(line);
        if (f) fence = f.fence;
        else if (blank(line)) closed = end + 1;
      }
      start = end + 1;
    }
    return closed;
  }

  // a reply's bubble: its Markdown, and a copy button for its raw text. Called again as the text
  // grows: the blocks closed in an earlier call stay as they are (bubble.juneMarkdown remembers
  // them); only what follows them is rendered again.
  function fill(bubble, text) {
    text = String(text || "");
    let kept = bubble.juneMarkdown;
    if (!kept || !text.startsWith(kept.closedText) || bubble.childNodes.length < kept.nodes) {
      bubble.replaceChildren();
      kept = { closedText: "", nodes: 0 };
    }
    while (bubble.childNodes.length > kept.nodes) bubble.lastChild.remove();  // the open tail and the button
    steps = 0;
    const closed = closedUpTo(text, kept.closedText.length);
    if (closed > kept.closedText.length) {
      bubble.appendChild(renderInto(text.slice(kept.closedText.length, closed)));
      kept = { closedText: text.slice(0, closed), nodes: bubble.childNodes.length };
    }
    bubble.appendChild(renderInto(text.slice(closed)));
    bubble.juneMarkdown = kept;
    bubble.dataset.markdown = "yes";
    bubble.appendChild(copyButton(() => text, "Copy reply")).classList.add("copy-reply");
  }

  return { render, fill, work: () => steps };
})();
