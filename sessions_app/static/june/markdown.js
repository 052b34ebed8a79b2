// Markdown for assistant replies (issue 40), rendered into DOM nodes: every piece of text goes in
// through textContent, never as HTML, so raw HTML in a model's or a tool's text is shown as text
// and never executed. CommonMark's everyday subset: headings, paragraphs, emphasis, inline code,
// fenced code blocks (the language shown, a copy button), bullet and numbered lists, block
// quotes, tables (GFM), links (http, https and mailto only; rel="noopener noreferrer").
// The server renders the same subset for the archive and the admin (sessions_app/markdown.py).
"use strict";

window.JuneMarkdown = (function () {
  const SAFE_LINK = /^(https?:|mailto:)/i;

  const { el } = window.JuneDom;  // dom.js

  // inline: `code`, **bold**, *em* / _em_, [text](url)
  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|(?<![\w])__([^_]+)__(?![\w])|\*([^*\s][^*]*)\*|(?<![\w])_([^_\s][^_]*)_(?![\w])|\[([^\]]+)\]\(([^)\s]+)\)/g;

  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      if (m[1]) parent.appendChild(el("code", null, m[2].trim()));
      else if (m[3] || m[4]) inline(parent.appendChild(el("strong")), m[3] || m[4]);
      else if (m[5] || m[6]) inline(parent.appendChild(el("em")), m[5] || m[6]);
      else if (m[7]) {
        if (SAFE_LINK.test(m[8])) {
          const a = el("a");
          a.href = m[8]; a.rel = "noopener noreferrer"; a.target = "_blank";
          inline(a, m[7]);
          parent.appendChild(a);
        } else parent.appendChild(document.createTextNode(m[0]));
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
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

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  }

  function render(text) {
    const root = document.createDocumentFragment();
    const lines = String(text || "").split("\n");
    let i = 0;
    let para = [];
    const flush = () => {
      if (para.length) { const p = el("p"); inline(p, para.join(" ")); root.appendChild(p); para = []; }
    };
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)\s*$/))) {  // a fenced code block
        flush();
        const fence = m[1], lang = m[2], body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
        i++;
        const code = body.join("\n");
        const box = el("div", "code-block");
        const head = el("div", "code-head");
        const tag = head.appendChild(el("span", "code-lang"));
        tag.dataset.lang = lang || "text";
        head.appendChild(copyButton(() => code));
        const pre = el("pre");
        pre.tabIndex = 0;  // a long line scrolls: the keyboard must reach it (axe: scrollable-region-focusable)
        const c = el("code", null, code);
        if (lang) c.dataset.lang = lang;
        pre.appendChild(c);
        box.append(head, pre);
        root.appendChild(box);
        continue;
      }
      if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
        flush();
        const h = el(`h${Math.min(6, m[1].length + 2)}`, "md-h");
        inline(h, m[2].replace(/\s+#+\s*$/, ""));
        root.appendChild(h);
        i++;
        continue;
      }
      if (line.includes("|") && i + 1 < lines.length && /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
        flush();
        const table = el("table", "md-table");
        const tr = el("tr");
        for (const c of cells(line)) inline(tr.appendChild(el("th")), c);
        table.appendChild(el("thead")).appendChild(tr);
        const body = table.appendChild(el("tbody"));
        i += 2;
        while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
          const row = body.appendChild(el("tr"));
          for (const c of cells(lines[i])) inline(row.appendChild(el("td")), c);
          i++;
        }
        root.appendChild(table);
        continue;
      }
      if ((m = line.match(/^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/))) {
        flush();
        const ordered = /\d/.test(m[1]);
        const list = el(ordered ? "ol" : "ul");
        if (ordered && parseInt(m[1], 10) !== 1) list.start = parseInt(m[1], 10);
        while (i < lines.length && (m = lines[i].match(/^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/)) && /\d/.test(m[1]) === ordered) {
          inline(list.appendChild(el("li")), m[2]);
          i++;
        }
        root.appendChild(list);
        continue;
      }
      if ((m = line.match(/^\s*>\s?(.*)$/))) {
        flush();
        const quote = [];
        while (i < lines.length && (m = lines[i].match(/^\s*>\s?(.*)$/))) { quote.push(m[1]); i++; }
        const q = el("blockquote");
        q.appendChild(render(quote.join("\n")));
        root.appendChild(q);
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      para.push(line.trim());
      i++;
    }
    flush();
    return root;
  }

  // a reply's bubble: its Markdown, and a copy button for its raw text
  function fill(bubble, text) {
    bubble.replaceChildren(render(text));
    bubble.dataset.markdown = "yes";
    bubble.appendChild(copyButton(() => text, "Copy reply")).classList.add("copy-reply");
  }

  return { render, fill };
})();
