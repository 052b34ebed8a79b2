"""Formatted replies in Chromium (issue 40 item 1): an assistant's Markdown renders (a table, a
code block with its language and a copy button, lists, emphasis, safe links) while it streams
and after a reload; HTML in a reply is shown as text and never runs; the user's text stays
plain. The demo model echoes the message ("You said: …"), so the reply carries the Markdown."""

from __future__ import annotations

from sessions_app import markdown
from tests.browser.conftest import open_chat, send_message, wait_live
from tests.markdown_corpus import CORPUS

MARKDOWN = (
    "plan\n\n| item | qty |\n|---|---|\n| tea | 2 |\n| mugs | 4 |\n\n"
    "```python\nprint('hi')\n```\n\n- **bold** one\n- *em* two\n\n"
    "[docs](https://example.com/docs) and [bad](javascript:window.__clicked=1)"
)
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> **still bold**'


#: the chat's renderer, as the page loaded it (an ES module: the same instance)
MODULE = "(await import(new URL('markdown.js', document.querySelector('script[src*=\"june/chat/main.js\"]').src)))"
#: how many block quotes ``>`` × 5,000 nests, on the server as in the browser
DEEPEST = markdown.to_html(">" * 5000 + " x").count("<blockquote>")


def _done(page, n):
    page.wait_for_function(f"document.querySelectorAll('.msg.assistant:not(.streaming)').length === {n}")


def test_a_reply_renders_markdown_and_html_in_it_never_runs(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "md1")
    send_message(page, MARKDOWN)
    _done(page, 1)
    reply = page.locator(".msg.assistant").last
    assert reply.locator("table.md-table td").all_text_contents() == ["tea", "2", "mugs", "4"]
    assert reply.locator(".code-block code").text_content() == "print('hi')"
    assert reply.locator(".code-block .code-lang").get_attribute("data-lang") == "python"
    assert reply.locator(".code-block button.copy").count() == 1
    assert reply.locator("li strong").text_content() == "bold" and reply.locator("li em").text_content() == "em"
    link = reply.locator("a", has_text="docs")
    assert link.get_attribute("href") == "https://example.com/docs"
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert reply.locator("a", has_text="bad").count() == 0  # a javascript: link stays text
    assert reply.locator("button.copy-reply").count() == 1
    # the user's own text stays plain
    assert page.locator(".msg.user").last.locator("table").count() == 0
    assert "| tea | 2 |" in page.locator(".msg.user").last.text_content()

    send_message(page, XSS)
    _done(page, 2)
    reply = page.locator(".msg.assistant").last
    assert "<img src=x" in reply.text_content() and reply.locator("img, script").count() == 0
    assert reply.locator("strong").text_content() == "still bold"
    page.wait_for_timeout(200)
    assert page.evaluate("window.__xss === undefined && window.__clicked === undefined")

    page.reload()  # the same after a reload (replayed from the log)
    wait_live(page)
    _done(page, 2)
    first = page.locator(".msg.assistant").first
    assert first.locator("table.md-table").count() == 1 and first.locator(".code-block").count() == 1
    assert page.evaluate("window.__xss === undefined")


def test_the_archive_renders_the_same_markdown_safely(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "md2")
    send_message(page, MARKDOWN + "\n\n" + XSS)
    _done(page, 1)
    page.once("dialog", lambda d: d.accept())
    page.click("#reset")
    page.wait_for_selector("#notice >> text=archived as md2#g0", timeout=30000)
    page.goto("/agents/ops/sessions/md2/archive/0/")
    reply = page.locator(".msg.assistant").last
    assert reply.locator("table td").first.text_content() == "tea"
    assert reply.locator("pre code").text_content().strip() == "print('hi')"
    assert reply.locator("img, script").count() == 0 and "<img src=x" in reply.text_content()
    assert reply.locator('a[href="https://example.com/docs"][rel="noopener noreferrer"]').count() == 1
    assert page.evaluate("window.__xss === undefined")


def test_a_right_aligned_column_is_right_aligned(june_server, make_user, new_page):
    """A table's ``---:`` column rendered left-aligned."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "md3")
    # a table is a block of its own ("You said: " before it on its header line would be a third column)
    send_message(page, "aligned:\n\n| item | qty |\n|:---|---:|\n| tea | 2 |")
    _done(page, 1)
    cells = page.locator(".msg.assistant table.md-table td")
    assert cells.first.evaluate("(c) => getComputedStyle(c).textAlign") in ("left", "start")
    assert cells.nth(1).evaluate("(c) => getComputedStyle(c).textAlign") == "right"


def test_backtick_runs_and_deep_quotes_render_at_once(june_server, make_user, new_page):
    """The inline regex was cubic on backtick runs (3,000 backticks: 5.3 s of main thread; a
    reply with 6,000 froze the tab 43 s on every load) and ~5,000 nested ``>`` threw "Maximum
    call stack size exceeded", leaving an empty bubble."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "md4")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    send_message(page, "`" * 3000)
    _done(page, 1)
    ms = page.evaluate(
        f"async () => {{ const md = {MODULE}; const t = performance.now(); md.render('You said: ' + '`'.repeat(20000));"
        " md.render('>'.repeat(5000) + ' deep'); return performance.now() - t; }"
    )
    assert ms < 5000  # generous under load: linear work is milliseconds; the old regex took minutes
    quotes = open_chat(new_page(alice), "ops", "md5")
    quotes.on("pageerror", lambda e: errors.append(str(e)))
    send_message(quotes, "deep:\n" + ">" * 5000 + " down here")
    _done(quotes, 1)
    reply = quotes.locator(".msg.assistant").last
    # markdown-it (the server's as the browser's) draws 20 levels and stops there: what is deeper
    # is not drawn (Copy reply copies it), and the bubble is never empty
    assert "deep:" in reply.text_content()
    # deeper ">" are text (markdown-it's nesting limit, the server's too)
    assert reply.evaluate("(r) => r.querySelectorAll('blockquote').length") == DEEPEST
    assert errors == []


#: what may differ between two parses of the same HTML: attribute order (a canonical outline)
OUTLINE = """(html) => {
  const t = document.createElement("template");
  t.innerHTML = html;
  const walk = (n) => n.nodeType === 3 ? JSON.stringify(n.data) : n.nodeType !== 1 ? "" :
    `<${n.localName}${[...n.attributes].map((a) => ` ${a.name}=${JSON.stringify(a.value)}`).sort().join("")}>` +
    [...n.childNodes].map(walk).join("") + `</${n.localName}>`;
  return [...t.content.childNodes].map(walk).join("");
}"""


def test_the_browser_renders_the_corpus_as_the_server_does(june_server, make_user, new_page):
    """One Markdown renderer: the chat's markdown-it + DOMPurify under the server's allow-list
    gives, for every text of the corpus, the DOM the server's markdown-it-py + nh3 gives."""
    page = open_chat(new_page(make_user("alice")), "ops", "md6")
    browser = page.evaluate(
        f"async (corpus) => {{ const md = {MODULE}; const outline = {OUTLINE};"
        " return Object.fromEntries(Object.entries(corpus).map(([k, v]) => [k, outline(md.toHtml(v))])); }",
        CORPUS,
    )
    server = page.evaluate(
        f"(htmls) => {{ const outline = {OUTLINE}; return Object.fromEntries(Object.entries(htmls).map(([k, v]) => [k, outline(v)])); }}",
        {name: markdown.to_html(text) for name, text in CORPUS.items()},
    )
    for name in CORPUS:
        assert browser[name] == server[name], name
    # the corpus holds what it should: a right-aligned cell, a link kept, a javascript: one dropped
    html = {name: markdown.to_html(CORPUS[name]) for name in ("table_aligned", "links", "hostile_html")}
    assert 'style="text-align:right"' in html["table_aligned"]
    assert 'href="https://example.com/docs"' in html["links"] and 'href="javascript' not in html["links"].lower()
    assert "<script" not in html["hostile_html"] and "&lt;script&gt;" in html["hostile_html"]
