// The chat's Markdown renderer (sessions_app/static/june/markdown.js) under node:test: what it
// draws, that its work grows linearly with the text whatever the text (its inline regex was
// cubic on backtick runs: 3,000 backticks took 5.3 s; ~5,000 nested ">" overflowed the stack),
// and that a streamed reply is rendered incrementally (closed blocks are drawn once).
import { test } from "node:test";
import assert from "node:assert/strict";
import { document, load, outline } from "./fakedom.mjs";

const { JuneMarkdown: md } = load("dom.js", "markdown.js");
const html = (text) => outline(md.render(text));
const work = (text) => { md.render(text); return md.work(); };

test("the everyday subset", () => {
  assert.equal(html("# Title ##"), '<h3.md-h>Title</h3>');
  assert.equal(html("a **b** *c* __d__ _e_ `f`"), "<p>a <strong>b</strong> <em>c</em> <strong>d</strong> <em>e</em> <code>f</code></p>");
  assert.equal(html("snake_case_name and 2*3*4"), "<p>snake_case_name and 2<em>3</em>4</p>");
  assert.equal(html("- one\n- two\n\n3. three"), "<ul><li>one</li><li>two</li></ul><ol start=3><li>three</li></ol>");
  assert.equal(html("> quoted\n> more"), "<blockquote><p>quoted more</p></blockquote>");
  assert.equal(html("``a ` b``"), "<p><code>a ` b</code></p>");
  assert.equal(html("``` two words"), "<p>``` two words</p>");
});

test("links: http, https and mailto only", () => {
  assert.equal(html("[docs](https://example.com/d)"), "<p><a href=https://example.com/d>docs</a></p>");
  assert.equal(html("[bad](javascript:alert(1))"), "<p>[bad](javascript:alert(1))</p>");
  assert.equal(html("[x](mailto:a@b.c)"), "<p><a href=mailto:a@b.c>x</a></p>");
});

test("HTML in the text is text", () => {
  const out = md.render('<img src=x onerror="alert(1)"> <script>x</script>');
  assert.equal(out.childNodes[0].childNodes.length, 1);
  assert.equal(out.childNodes[0].childNodes[0].nodeType, 3);
});

test("a table keeps its columns' alignment", () => {
  const out = html("| item | qty | note |\n|:---|---:|:---:|\n| tea | 2 | ok |");
  assert.equal(
    out,
    "<table.md-table><thead><tr><th data-align=left>item</th><th data-align=right>qty</th><th data-align=center>note</th></tr></thead>" +
      "<tbody><tr><td data-align=left>tea</td><td data-align=right>2</td><td data-align=center>ok</td></tr></tbody></table>",
  );
});

test("a fenced code block, with its language", () => {
  const out = md.render("```python\nprint('**hi**')\n```");
  const box = out.childNodes[0];
  assert.equal(box.className, "code-block");
  assert.equal(box.childNodes[1].textContent, "print('**hi**')");
  assert.equal(box.childNodes[0].childNodes[0].dataset.lang, "python");
});

test("nested quotes are bounded: 5,000 levels render, 8 deep", () => {
  const text = ">".repeat(5000) + " deep";
  const out = md.render(text);
  let depth = 0;
  for (let node = out.childNodes[0]; node && node.tagName === "BLOCKQUOTE"; node = node.childNodes[0]) depth++;
  assert.equal(depth, 8);
  assert.ok(out.textContent.endsWith("deep"));
  const lines = Array.from({ length: 3000 }, (_, i) => ">".repeat(i + 1) + " x").join("\n");
  assert.doesNotThrow(() => md.render(lines));
});

// Pathological inputs at two sizes: the work (steps counted by the renderer) per character stays
// under a constant, and quadrupling the text at most about quadruples the work.
const HOSTILE = {
  backticks: (n) => "`".repeat(n),
  "text then backticks": (n) => "You said: " + "`".repeat(n - 10),
  "backtick runs of every length": (n) => { let s = ""; for (let k = 1; s.length < n; k++) s += "`".repeat(k) + " "; return s.slice(0, n); },
  stars: (n) => "*".repeat(n),
  "star pairs": (n) => "**a ".repeat(n / 4),
  underscores: (n) => "_a ".repeat(n / 3),
  "open links": (n) => "[a](b ".repeat(n / 6),
  "link texts": (n) => "[".repeat(n / 2) + "]".repeat(n / 2),
  spaces: (n) => "#" + " ".repeat(n - 2) + "x",
  "table separators": (n) => "a|b\n" + "|" + " ".repeat(n) + "---",
  "quote lines": (n) => "> > > > > > > > > > x\n".repeat(n / 22),
};

for (const [name, make] of Object.entries(HOSTILE)) {
  test(`linear work on ${name}`, () => {
    const small = work(make(5000));
    const large = work(make(20000));
    assert.ok(large <= 40 * 20000, `${name}: ${large} steps for 20,000 characters`);
    assert.ok(large <= 5 * Math.max(small, 1000), `${name}: ${small} -> ${large} steps for 4x the text`);
  });
}

test("20,000 backticks after a word render at once (the old regex: 2,000 took 46 s)", () => {
  const started = process.hrtime.bigint();
  md.render("You said: " + "`".repeat(20000));
  md.render("`".repeat(20000) + "x" + "`".repeat(19999));
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  assert.ok(ms < 5000, `${ms} ms`);  // generous: linear work is a few ms; cubic was minutes
});

test("a streamed reply draws its closed blocks once and ends as a whole render does", () => {
  const text = Array.from({ length: 60 }, (_, i) => `## part ${i}\n\nsome *text* ${i}\n\n\`\`\`\ncode ${i}\n\n\`\`\``).join("\n\n");
  const bubble = document.createElement("div");
  let total = 0;
  let firstNode = null;
  for (let end = 1; end <= text.length; end += 7) {
    md.fill(bubble, text.slice(0, end));
    total += md.work();
    if (!firstNode && bubble.childNodes.length > 3) firstNode = bubble.childNodes[0];
  }
  md.fill(bubble, text);
  assert.equal(bubble.childNodes[0], firstNode);  // the first heading was never drawn again
  const whole = document.createElement("div");
  whole.appendChild(md.render(text));
  const drawn = bubble.childNodes.slice(0, -1).map(outline).join("");  // without the copy button
  assert.equal(drawn, whole.childNodes.map(outline).join(""));
  // re-rendering from the start at each of the ~text/7 deltas would be quadratic
  const fromScratch = (text.length / 7) * work(text) / 2;
  assert.ok(total < fromScratch / 5, `${total} steps streamed; from scratch about ${fromScratch}`);
});

test("a text that is not a continuation is drawn afresh", () => {
  const bubble = document.createElement("div");
  md.fill(bubble, "first\n\nsecond");
  md.fill(bubble, "other\n\nthing");
  assert.equal(bubble.childNodes.slice(0, -1).map(outline).join(""), "<p>other</p><p>thing</p>");
});
