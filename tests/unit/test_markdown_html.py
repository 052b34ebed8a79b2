"""Assistant text as HTML for the archive and the admin (sessions_app/markdown.py): Markdown in,
nothing executable out, whatever the text (XSS payloads from a model or a tool's result)."""

import sys
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.markdown import TAGS, to_html


class _Tags(HTMLParser):
    """Every real tag and attribute of the HTML (escaped text is text, whatever it reads)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def assert_safe(html: str) -> None:
    for tag, attrs in _Tags(html).found:
        assert tag in TAGS, (tag, html)
        assert not any(name.startswith("on") or name in ("style", "src") for name in attrs), (tag, attrs)
        if tag == "a":
            # an autolink of another scheme (``<aa:>``) keeps its anchor, its href removed: inert
            href = attrs.get("href")
            assert href is None or href.lower().startswith(("http://", "https://", "mailto:")), attrs
            assert attrs.get("rel") == "noopener noreferrer", attrs


PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    '<a href="javascript:alert(1)">x</a>',
    "<svg/onload=alert(1)>",
    "<iframe src=//evil></iframe>",
    "<aa:>",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "``<b onmouseover=alert(1)>``",
    "| a | b |\n|---|---|\n| <script>x</script> | [y](vbscript:msgbox) |",
    "<style>body{display:none}</style>",
]


def test_markdown_renders_the_everyday_subset():
    html = to_html(
        "# Title\n\nSome **bold** and *em* and `code`.\n\n- one\n- two\n\n"
        "```python\nprint('hi')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n[site](https://example.com)"
    )
    for piece in (
        "<h1>Title</h1>",
        "<strong>bold</strong>",
        "<em>em</em>",
        "<code>code</code>",
        "<li>one</li>",
        '<code class="language-python">',
        "<table>",
        "<td>1</td>",
        '<a href="https://example.com" rel="noopener noreferrer">site</a>',
    ):
        assert piece in html, (piece, html)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_raw_html_and_script_links_never_come_out(payload):
    assert_safe(to_html(payload))


@pytest.mark.parametrize(
    "text", ["[a]()", "[]()", "[a](<>)", "[a](x)", "[a](/admin/)", "[a](#top)", "[a](//evil.example)"]
)
def test_a_link_without_an_allowed_scheme_loses_its_target(text):
    """docs/ui.md: links are http, https and mailto only; a relative, empty or scheme-less link
    kept its href (hypothesis found ``[]()``)."""
    html = to_html(text)
    assert "<a " in html and "href" not in html, html
    assert_safe(html)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>\"'=/:*_`#|-[]()!\n ajscriptonerrorimg")), max_size=200))
def test_no_text_makes_a_tag_or_handler(text):
    assert_safe(to_html(text))


def test_a_code_block_is_reachable_by_keyboard_and_a_typed_pre_tag_stays_text():
    """Issue 40 item 5 (axe: scrollable-region-focusable): a code block's <pre> takes focus, so a
    long line can be scrolled without a mouse; the rewrite never touches text."""
    html = to_html("```\nx = 1\n```\n\nand <pre>not a tag</pre>")
    assert html.count('<pre tabindex="0">') == 1 and "&lt;pre&gt;not a tag&lt;/pre&gt;" in html


def test_a_tables_column_alignment_is_kept_and_no_other_style():
    """A right-aligned Markdown column rendered left-aligned (the sanitizer dropped the style)."""
    html = to_html('| a | b |\n|:--|--:|\n| 1 | <span style="color:red">2</span> |')
    assert '<th style="text-align:right">b</th>' in html and '<td style="text-align:left">1</td>' in html
    assert "color" not in html.replace("&lt;span style=&quot;color:red&quot;&gt;", "").replace(
        '&lt;span style="color:red"&gt;', ""
    )


def counted(fn, *args):
    """``fn(*args)`` and how many Python and C function calls it made on this thread."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(profile)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, calls


@pytest.mark.parametrize(
    "text",
    [
        "_*" * 100_000,
        "[" * 200_000,
        "![" * 100_000,
        "- a\n" * 50_000,
        "a\n\n" * 66_000,
        "|x|y|\n|-|-|\n" + "|*a*|[b](c)|\n" * 15_000,
    ],
    ids=["emphasis", "brackets", "images", "list", "paragraphs", "table"],
)
def test_a_reply_at_the_size_limit_renders_in_bounded_time_whatever_its_marks(text):
    """A 200,000-character reply of ``_*`` took markdown-it-py seconds, on every view of a page
    showing it (markdown-it-py's work per inline mark or block is about constant, and large):
    past ``BUDGET`` rule calls the reply is shown as written, escaped, its paragraphs kept."""
    html, calls = counted(to_html, text)
    # the work counted in Python and C calls, not seconds (a loaded machine's seconds vary): a few
    # times the budget's, where an unmetered parse of these texts makes 8 to 12 million
    assert calls < 3_000_000, f"{calls:,} calls"
    assert html.startswith("<p>") and "<em>" not in html and "<li>" not in html and "<a " not in html
    assert_safe(html)


def test_a_long_reply_within_the_budget_keeps_its_marks_and_one_over_it_is_shown_as_written():
    from sessions_app.markdown import BUDGET, markdown_html

    ordinary = "A paragraph with **bold**, *em* and `code`, and a [link](https://example.com/n).\n\n" * 600
    assert markdown_html(ordinary).count("<strong>") == 600  # 50,000 characters of dense Markdown
    assert markdown_html("*a* " * (BUDGET // 5)).count("<em>") == BUDGET // 5  # four calls each
    over = markdown_html("*a* " * BUDGET + "\n\n<b>x</b> & y\nz")
    assert "<em>" not in over and over.endswith("<p>&lt;b&gt;x&lt;/b&gt; &amp; y<br>\nz</p>\n")
