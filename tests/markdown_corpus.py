"""One corpus of assistant replies the chat's Markdown (static/june/chat/markdown.js) and the
server's (sessions_app/markdown.py) must render alike: tables with aligned columns, code, links
good and bad, hostile HTML, long and deep input. tests/unit/test_frontend.py compares markdown-it's
output both sides; tests/browser/test_markdown.py compares the whole, sanitizer included."""

from __future__ import annotations

CORPUS: dict[str, str] = {
    "everyday": (
        "# Title ##\n\na **b** *c* __d__ _e_ `f` ~~g~~\n\nsnake_case_name and 2*3*4\n\n- one\n- two\n\n"
        "3. three\n4. four\n\n> quoted\n> more\n\n``a ` b``\n\n---\n\nline one  \nline two"
    ),
    "table_aligned": (
        "| item | qty | note | plain |\n|:---|---:|:---:|---|\n| tea | 2 | ok | x |\n"
        "| **mugs** | 4 | `c` | [l](https://e.com) |"
    ),
    "table_ragged": "a | b\n--|--\n1 | 2 | 3\n4\n\n| x |\n|-|\n| pipe \\| inside |",
    "code": (
        "```python\nprint('<b>hi</b>')\n```\n\n~~~\nplain <i>\n~~~\n\n    indented code\n\n"
        "```js extra words\nlet a = 1;\n```\n\n```\nunclosed"
    ),
    "links": (
        '[docs](https://example.com/docs "The docs") [mail](mailto:a@b.c) [rel](/relative) '
        "[bad](javascript:alert(1)) [data](data:text/html,<b>x</b>) [vb](vbscript:x) [JS](JAVASCRIPT:alert(1)) "
        "[tel](tel:123) [ftp](ftp://e.com/f) <https://auto.example/x> [ref][r] ![img](https://e.com/i.png)\n\n"
        "[r]: https://ref.example/"
    ),
    "hostile_html": (
        '<img src=x onerror="alert(1)"> <script>alert(2)</script> **still bold**\n\n'
        '<div onclick="x()">block html</div>\n\n<a href="javascript:alert(3)">a</a> &lt;escaped&gt; &amp; &copy; &#x3C;'
    ),
    "hostile_attrs": (
        '[x](https://e.com" onmouseover="alert(1)) [y](<https://e.com/a b>) `<script>` '
        '[z](https://e.com/?q="><script>) [s](https://e.com "t\\" onclick=\\"x")'
    ),
    "deep_quotes": ">" * 300 + " deep",
    "deep_lists": "".join("  " * i + f"- level {i}\n" for i in range(60)),
    "deep_emphasis": "*" * 500 + "x" + "*" * 500,
    "backticks": "`" * 3000,
    "brackets": "[" * 2000 + "x" + "](" * 500,
    "long": "A paragraph with **bold**, *em* and `code`, and a [link](https://example.com/n).\n\n" * 400,
    "unicode": "caf\u00e9 \u2014 \u00a0 \U0001f600 \u202e rtl",
    "over_budget": "*a* _b_ " * 1300 + '\n\n<i>as</i> written\r\n& "kept"\n\n\n  last  ',
    "within_budget": "*a* _b_ " * 1000,
    "headings": "Title\n=====\n\nSub\n---\n\n####### seven\n\n### closed ###",
}
