"""Search in what was said, and downloads of a conversation (issue 40 item 4).

A person searches the live generation of their own sessions (the session list, ``/?q=``, and
``GET /api/search``); staff search every session and generation in the admin; a generation
downloads as Markdown and JSON. Runs on SQLite (substring match) and on PostgreSQL (full-text
search or substrings) alike.
"""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

from sessions_app import models as m
from sessions_app import search, services

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "<script>alert('x')</script>"


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def people():
    User = get_user_model()
    return (
        User.objects.create_user("alice", password="pw-alice-123"),
        User.objects.create_user("bob", password="pw-bob-123"),
        User.objects.create_user("sam", password="pw-sam-123", is_staff=True),
    )


@pytest.fixture
def said(q2_sync, people):
    """alice: s1 with an archived generation (g0: "zebra archived words") and a live one (the
    <script> message, "order blue mugs" with its tool call and result); bob: b1 with "zebra
    bob's secret"."""
    alice, bob, _ = people
    services.turn_start(agent="ops", key="s1", text="zebra archived words", user=alice)
    services.session_reset(agent="ops", key="s1", user=alice)
    services.turn_start(agent="ops", key="s1", text=f"zebra live {SCRIPT}", user=alice)
    services.turn_start(agent="ops", key="s1", text="order blue mugs", user=alice)
    services.turn_start(agent="ops", key="b1", text="zebra bob's secret", user=bob)
    return m.Session.objects.get(agent="ops", key="s1")


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_parse_query_bounds_and_terms():
    assert search.parse_query("  blue   mugs ") == "blue mugs"
    for bad in ("", "   ", "x" * (search.MAX_QUERY_CHARS + 1), "a\x00b", None):
        with pytest.raises(Exception) as caught:
            search.parse_query(bad)
        assert caught.value.http_status == 400
    found = search.terms('blue "big mug" -red or -"x y"')
    assert found.wanted == ("blue", "big mug") and found.unwanted == ("red", "x y")


def test_highlight_escapes_the_text_and_marks_the_match():
    html = str(search.highlight(f"before {SCRIPT} after", "script"))
    assert "<script>" not in html and "&lt;<mark>script</mark>&gt;" in html
    assert html.count("<mark>") == 2 and "alert(&#x27;x&#x27;)" in html


def test_a_person_finds_only_their_own_live_messages(said, people):
    alice, bob, _ = people
    page = login(alice).get("/", {"q": "zebra"})
    assert page.status_code == 200
    html = re.search(r'<section class="card search-results".*?</section>', page.content.decode(), re.DOTALL)[0]
    hits = re.findall(r'<li class="hit" data-agent="ops" data-key="([^"]+)" data-index="(\d+)"', html)
    assert hits and {key for key, _ in hits} == {"s1"}  # never bob's b1
    assert "secret" not in html  # nor in a snippet
    assert "zebra archived" not in html.replace('hit-title">zebra archived words', "")  # nor alice's archive
    # the hit links to the chat at that message, and the match is marked inside escaped text
    index = hits[0][1]
    assert f'href="/agents/ops/sessions/s1/?at={index}#m{index}"' in html
    assert SCRIPT not in html and "&lt;script&gt;" in html and "<mark>zebra</mark>" in html
    # the same over the API
    body = json.loads(login(alice).get("/api/search", {"q": "zebra"}).content)
    # the message, and the demo agent's reply that repeats it ("You said: …"); not the archive's
    assert sorted((r["session"], r["role"]) for r in body["results"]) == [("s1", "assistant"), ("s1", "user")]
    assert body["more"] is False
    for r in body["results"]:
        assert r["url"] == f"/agents/ops/sessions/s1/?at={r['index']}#m{r['index']}"
        assert "<mark>zebra</mark>" in r["snippet_html"] and SCRIPT in r["snippet"]
        assert SCRIPT not in r["snippet_html"] and "&lt;script&gt;" in r["snippet_html"]
    bob_body = json.loads(login(bob).get("/api/search", {"q": "zebra"}).content)
    assert {r["session"] for r in bob_body["results"]} == {"b1"}


def test_search_finds_replies_and_is_case_insensitive(said, people):
    alice = people[0]
    body = json.loads(login(alice).get("/api/search", {"q": "BLUE mugs"}).content)
    roles = {r["role"] for r in body["results"]}
    assert "user" in roles  # "order blue mugs"
    # a word only a reply holds (the demo agent's answer to an order names it)
    reply = [
        r
        for r in m.Message.objects.filter(session=said, generation=said.generation, role="assistant").order_by("index")
        if r.data.get("text")
    ][-1]
    word = max(re.findall(r"[A-Za-z]{5,}", reply.data["text"]), key=len)
    body = json.loads(login(alice).get("/api/search", {"q": word}).content)
    assert any(r["role"] == "assistant" and r["index"] == reply.index for r in body["results"])
    assert json.loads(login(alice).get("/api/search", {"q": "-zebra"}).content)["results"] == []


def test_full_text_on_postgresql_substrings_elsewhere(said, people):
    """The matcher is chosen by the database: PostgreSQL stems ("ordering" finds "order blue
    mugs"), SQLite matches substrings only (and so finds "rder blu", which full-text alone would not)."""
    alice = people[0]

    def roles(q):
        return {r["role"] for r in json.loads(login(alice).get("/api/search", {"q": q}).content)["results"]}

    assert "user" in roles("rder blu")  # the substring fallback, on both
    if connection.vendor == "postgresql":
        assert "user" in roles("orders ordering")
        found = json.loads(login(alice).get("/api/search", {"q": "ordering"}).content)["results"]
        assert any("<mark>order</mark>" in r["snippet_html"] for r in found)  # the stem is marked
    else:
        assert roles("orders ordering") == set()


def test_an_over_long_or_empty_query_is_refused_with_words(said, people):
    alice = people[0]
    long = "z" * (search.MAX_QUERY_CHARS + 1)
    api = login(alice).get("/api/search", {"q": long})
    assert api.status_code == 400 and api["Content-Type"] == "application/json"
    assert json.loads(api.content)["error"]["code"] == "bad_request"
    assert login(alice).get("/api/search").status_code == 400
    page = login(alice).get("/", {"q": long})
    assert page.status_code == 400
    assert f"longer than {search.MAX_QUERY_CHARS} characters" in page.content.decode()
    assert Client().get("/api/search", {"q": "zebra"}).status_code == 401


def test_results_are_capped_with_more(said, people, monkeypatch):
    alice = people[0]
    monkeypatch.setattr(search, "MAX_RESULTS", 1)
    body = json.loads(login(alice).get("/api/search", {"q": "zebra"}).content)
    assert len(body["results"]) == 1 and body["more"] is True  # a message and its echo matched
    assert "More messages match" in login(alice).get("/", {"q": "zebra"}).content.decode()


def test_staff_search_every_generation_and_open_the_message(said, people):
    alice, _, staff = people
    url = reverse("admin:sessions_app_session_search")
    assert login(alice).get(url, {"q": "zebra"}).status_code == 302  # to the admin login
    page = login(staff).get(url, {"q": "zebra"})
    assert page.status_code == 200
    html = page.content.decode()
    hits = re.findall(r'<li class="june-hit" data-session="(\d+)" data-generation="(\d+)" data-index="(\d+)"', html)
    b1 = m.Session.objects.get(key="b1")
    assert {(int(s), int(g)) for s, g, _ in hits} == {(said.pk, 0), (said.pk, 1), (b1.pk, 0)}
    assert "archived · user" in html and "live · user" in html
    assert SCRIPT not in html and "&lt;script&gt;" in html and "<mark>zebra</mark>" in html
    # a hit opens the generation page at that message
    link = re.search(rf'href="([^"]*/{said.pk}/generation/0/\?at=(\d+)#m\d+)"', html)
    assert link
    generation = login(staff).get(link[1].replace("&amp;", "&"))
    assert generation.status_code == 200 and f'id="m{link[2]}"' in generation.content.decode()
    assert login(staff).get(url, {"q": "x" * 201}).status_code == 400
    # found from the sessions list and each generation page, which also offers the downloads
    assert url in login(staff).get(reverse("admin:sessions_app_session_changelist")).content.decode()
    generation_html = generation.content.decode()
    assert url in generation_html
    assert reverse("admin:sessions_app_session_export_md", args=[said.pk, 0]) in generation_html


def test_staff_search_reads_a_constant_number_of_queries(said, people, django_assert_max_num_queries):
    """Each hit (three messages and their echoes) names its owner: read with the hits, not once per hit."""
    staff = people[2]
    client = login(staff)
    client.get(reverse("admin:sessions_app_session_search"), {"q": "zebra"})  # warm the session and user
    with django_assert_max_num_queries(8):
        page = client.get(reverse("admin:sessions_app_session_search"), {"q": "zebra"})
    assert page.content.decode().count('class="june-hit"') == 6 and "owner alice" in page.content.decode()


def test_export_markdown_and_json_of_the_live_generation(said, people):
    alice = people[0]
    md = login(alice).get("/agents/ops/sessions/s1/export.md")
    assert md.status_code == 200 and md["Content-Type"].startswith("text/markdown")
    assert md["Content-Disposition"] == 'attachment; filename="ops-s1-g1.md"'
    text = md.content.decode()
    assert "## User" in text and "order blue mugs" in text and "## Tool result" in text
    assert text.startswith(f"# zebra live {SCRIPT}")  # the generation's first message, as written
    assert SCRIPT in text and "zebra archived" not in text
    js = login(alice).get("/agents/ops/sessions/s1/export.json")
    assert js["Content-Disposition"] == 'attachment; filename="ops-s1-g1.json"'
    doc = json.loads(js.content)
    assert doc["live"] is True and doc["generation"] == 1 and doc["truncated"] is False
    rows = m.Message.objects.filter(session=said, generation=1).order_by("index")
    assert [x["index"] for x in doc["messages"]] == [r.index for r in rows]
    assert doc["messages"][0] == {**doc["messages"][0], "role": "user", "text": f"zebra live {SCRIPT}"}
    turn_ids = set(m.Turn.objects.filter(session=said, generation=1).values_list("pk", flat=True))
    assert {x["turn_id"] for x in doc["messages"]} <= turn_ids and all(x["created_at"] for x in doc["messages"])
    calls = [c for x in doc["messages"] if x["role"] == "assistant" for c in x["tool_calls"]]
    results = [x for x in doc["messages"] if x["role"] == "tool"]
    assert calls and results and {c["id"] for c in calls} >= {r["call_id"] for r in results}
    # the API's: the same document, and an archived generation by ?generation=
    api = json.loads(login(alice).get("/api/agents/ops/sessions/s1/export", {"format": "json"}).content)
    assert [x["text"] for x in api["messages"]] == [x["text"] for x in doc["messages"]]
    g0 = login(alice).get("/api/agents/ops/sessions/s1/export", {"format": "md", "generation": "0"})
    assert g0["Content-Disposition"].startswith("attachment") and "zebra archived words" in g0.content.decode()
    assert login(alice).get("/api/agents/ops/sessions/s1/export", {"format": "pdf"}).status_code == 400
    assert login(alice).get("/api/agents/ops/sessions/s1/export", {"generation": "7"}).status_code == 404
    assert login(alice).get("/api/agents/ops/sessions/s1/export", {"generation": ""}).status_code == 400


def test_export_of_an_archived_generation_and_by_staff(said, people):
    alice, _, staff = people
    listing = login(alice).get("/agents/ops/sessions/s1/archive/").content.decode()
    generation_page = login(alice).get("/agents/ops/sessions/s1/archive/0/").content.decode()
    assert "/agents/ops/sessions/s1/archive/0/export.md" in listing
    assert "/agents/ops/sessions/s1/archive/0/export.json" in generation_page
    page = login(alice).get("/agents/ops/sessions/s1/archive/0/export.md")
    assert page.status_code == 200 and "zebra archived words" in page.content.decode()
    assert page["Content-Disposition"] == 'attachment; filename="ops-s1-g0.md"'
    assert login(alice).get("/agents/ops/sessions/s1/archive/1/export.md").status_code == 404  # live, not archived
    url = reverse("admin:sessions_app_session_export_json", args=[said.pk, 0])
    assert login(alice).get(url).status_code == 302
    doc = json.loads(login(staff).get(url).content)
    assert doc["generation"] == 0 and doc["live"] is False and doc["messages"][0]["text"] == "zebra archived words"


def test_another_users_export_is_not_found(said, people):
    bob = people[1]
    for path in (
        "/agents/ops/sessions/s1/export.md",
        "/agents/ops/sessions/s1/export.json",
        "/agents/ops/sessions/s1/archive/0/export.md",
        "/agents/ops/sessions/nope/export.md",
    ):
        response = login(bob).get(path)
        assert response.status_code == 404 and "zebra" not in response.content.decode()
    api = login(bob).get("/api/agents/ops/sessions/s1/export")
    assert api.status_code == 403 and "zebra" not in api.content.decode()
    assert Client().get("/agents/ops/sessions/s1/export.md").status_code == 302  # to the login


def test_the_chat_page_knows_the_message_to_open_at(said, people):
    alice = people[0]
    first = m.Message.objects.filter(session=said, generation=said.generation).order_by("index").first()
    page = login(alice).get(f"/agents/ops/sessions/s1/?at={first.index}")
    config = json.loads(
        re.search(r'<script id="june-config" type="application/json">(.*?)</script>', page.content.decode(), re.DOTALL)[
            1
        ]
    )
    assert config["focus"] == {"index": first.index, "role": "user", "turn_id": first.turn_id}
    assert 'id="export-md"' in page.content.decode()
    config = json.loads(
        re.search(
            r'<script id="june-config" type="application/json">(.*?)</script>',
            login(alice).get("/agents/ops/sessions/s1/?at=999").content.decode(),
            re.DOTALL,
        )[1]
    )
    assert config["focus"] is None


def test_markdown_fences_hold_any_backticks_and_file_names_are_safe():
    """A tool result holding a fence of its own cannot close the export's block around it, and a
    key's ``:`` and ``@`` (valid in keys) stay out of the download's file name."""
    from sessions_app import export

    doc = {
        "agent": "ops",
        "session": "mail:a@b",
        "title": "t",
        "generation": 2,
        "live": False,
        "exported_at": "now",
        "truncated": True,
        "messages": [
            {
                "index": 0,
                "role": "tool",
                "created_at": None,
                "text": "",
                "name": "shell",
                "is_error": False,
                "result": {"out": "````\nrm -rf /\n````"},
            }
        ],
    }
    text = export.as_markdown(doc)
    assert "\n`````json\n" in text and text.rstrip().endswith("`````")  # one tick more than the longest run
    assert "Only the first" in text and "(archived)" in text and "## Tool result · shell · #0" in text
    assert export.filename(doc, "md") == "ops-mail_a_b-g2.md"
