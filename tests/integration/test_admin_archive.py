"""The staff archive in the admin: sessions, their archived generations (transcript, steps,
events, who reset and when), turns with the journal; read-only, escaped, staff only."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sessions_app import models as m
from sessions_app import services
from sessions_app.store import eventlog

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "<script>alert('x')</script>"


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def people():
    User = get_user_model()
    alice = User.objects.create_user("alice", password="pw-alice-123")
    staff = User.objects.create_user("sam", password="pw-sam-123", is_staff=True)
    return alice, staff


@pytest.fixture
def archived(q2_sync, people):
    """Session s1 of alice: g0 (an order with a tool call, a <script> message), reset by alice;
    g1 (a greeting), reset by staff; g2 live and empty."""
    alice, staff = people
    services.turn_start(agent="ops", key="s1", text="order blue mugs", user=alice)
    services.turn_start(agent="ops", key="s1", text=f"hello {SCRIPT}", user=alice)
    services.session_reset(agent="ops", key="s1", user=alice)
    services.turn_start(agent="ops", key="s1", text="second generation hello", user=alice)
    services.session_reset(agent="ops", key="s1", user=alice)
    # the second reset is recorded as done by staff (what an operator's reset would write)
    m.SessionReset.objects.filter(generation=1).update(by=staff)
    services.turn_start(agent="ops", key="other", text="unrelated", user=staff)
    return m.Session.objects.get(agent="ops", key="s1")


def staff_client(client, people):
    client.force_login(people[1])
    return client


def gen_url(session, g):
    return reverse("admin:sessions_app_session_generation", args=[session.pk, g])


def test_each_archived_generation_shows_its_own_transcript_steps_and_events(client, people, archived):
    staff_client(client, people)
    g0 = client.get(gen_url(archived, 0))
    assert g0.status_code == 200
    page = g0.content.decode()
    assert "s1#g0" in page and "archived" in page
    # regression: the transcript page must not leak into the admin's messages-framework banner
    assert "Message object" not in page and 'class="messagelist"' not in page
    # the conversation: user, assistant with the tool call and its args, the tool result
    assert "order blue mugs" in page and "create_order" in page and "&quot;item&quot;: &quot;blue mugs&quot;" in page
    assert re.search(r'class="june-msg tool', page)
    assert page.count('class="june-msg ') == m.Message.objects.filter(session=archived, generation=0).count()
    # escaped: the <script> message is text, never markup
    assert SCRIPT not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    # steps and events of g0 only
    assert "model:1" in page and "tool:1:call_1_0" in page
    g0_events = m.Event.objects.filter(session=archived, generation=0).count()
    assert page.count('class="june-event"') == g0_events
    # events refer to the transcript in storage (sessions_app.store.eventlog); the page shows them whole
    assert any(
        eventlog.refers(data)
        for data in m.Event.objects.filter(session=archived, generation=0).values_list("data", flat=True)
    )
    assert "$from" not in page and page.count("&quot;item&quot;: &quot;blue mugs&quot;") >= 2
    assert "second generation hello" not in page
    # who reset g0, and when
    reset0 = m.SessionReset.objects.get(session=archived, generation=0)
    assert "Archived by a reset by <strong>alice</strong>" in page
    assert reset0.created_at.strftime("%Y-%m-%d") in page

    page1 = client.get(gen_url(archived, 1)).content.decode()
    assert "s1#g1" in page1 and "second generation hello" in page1 and "order blue mugs" not in page1
    assert "Archived by a reset by <strong>sam</strong>" in page1
    assert page1.count('class="june-event"') == m.Event.objects.filter(session=archived, generation=1).count()

    # the trail: Home › app › sessions › the session › this generation, the session a link back
    trail = re.search(r'<div class="breadcrumbs">(.*?)</div>', page1, re.S).group(1)
    change = reverse("admin:sessions_app_session_change", args=[archived.pk])
    assert re.findall(r'href="([^"]+)"', trail)[-1] == change and trail.rstrip().endswith("s1#g1")
    live = client.get(gen_url(archived, 2)).content.decode()
    assert "live generation" in live and "no messages in this generation" in live
    assert client.get(gen_url(archived, 3)).status_code == 404


def test_the_session_page_lists_every_generation_with_who_reset_it(client, people, archived):
    staff_client(client, people)
    page = client.get(reverse("admin:sessions_app_session_change", args=[archived.pk])).content.decode()
    rows = re.findall(r'data-generation="(\d+)"', page)
    assert rows == ["2", "1", "0"]
    assert page.count(">archived<") == 2 and ">live<" in page
    assert "<td>alice</td>" in page and "<td>sam</td>" in page
    # read-only: no save buttons, and a POST changes nothing
    assert 'name="_save"' not in page
    before = m.Session.objects.get(pk=archived.pk).key
    client.post(reverse("admin:sessions_app_session_change", args=[archived.pk]), {"key": "hacked"})
    assert m.Session.objects.get(pk=archived.pk).key == before
    assert client.get(reverse("admin:sessions_app_session_add")).status_code == 403
    assert client.get(reverse("admin:sessions_app_session_delete", args=[archived.pk])).status_code == 403


def test_search_by_key_agent_and_user(client, people, archived):
    staff_client(client, people)
    url = reverse("admin:sessions_app_session_changelist")

    def keys(**params):
        page = client.get(url, params).content.decode()
        return set(re.findall(r'href="/admin/sessions_app/session/\d+/change/[^"]*">([^<]+)</a>', page))

    assert keys(q="s1") == {"s1"}
    assert keys(q="alice") == {"s1"}
    assert keys(q="sam") == {"other"}
    assert keys(q="ops") == {"s1", "other"}
    assert keys(q="nothing-like-this") == set()
    assert keys(agent="ops", status="new") == {"s1"}
    # by date (the list filter's own parameters, as its links write them: aware midnights)
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow = today + dt.timedelta(days=1)
    assert keys(created_at__gte=str(today), created_at__lt=str(tomorrow)) == {"s1", "other"}
    assert keys(created_at__gte=str(tomorrow)) == set()
    # the archive entry lists only reset sessions
    archive = client.get(reverse("admin:sessions_app_archivedsession_changelist"), {"q": "s1"}).content.decode()
    assert ">s1</a>" in archive
    assert ">other</a>" not in client.get(reverse("admin:sessions_app_archivedsession_changelist")).content.decode()


def test_turn_page_shows_status_journal_lease_and_usage(client, people, archived):
    staff_client(client, people)
    turn = m.Turn.objects.filter(session=archived, generation=0).order_by("order").first()
    page = client.get(reverse("admin:sessions_app_turn_change", args=[turn.pk])).content.decode()
    assert turn.pk in page and "completed" in page and turn.attempt_id in page
    assert "committed" in page  # the journal phase
    assert "output_tokens" in page  # usage
    assert "Lease expiry" in page and turn.lease_owner in page and "tool:1:call_1_0" in page
    listing = client.get(reverse("admin:sessions_app_turn_changelist"), {"q": "s1"}).content.decode()
    assert listing.count('class="field-status_words"') == m.Turn.objects.filter(session=archived).count()


def test_non_staff_and_anonymous_are_refused(client, people, archived):
    alice = people[0]
    urls = [
        gen_url(archived, 0),
        reverse("admin:sessions_app_session_changelist"),
        reverse("admin:sessions_app_session_change", args=[archived.pk]),
        reverse("admin:sessions_app_turn_changelist"),
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    client.force_login(alice)  # the session's owner, but not staff
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
        assert b"order blue mugs" not in response.content


def test_a_big_generation_page_is_paginated_in_constant_queries(client, people, q2_sync):
    """Pins: a page listing messages/events must not grow with the session (no N+1)."""
    staff_client(client, people)
    alice = people[0]
    services.turn_start(agent="ops", key="big", text="hello", user=alice)
    session = m.Session.objects.get(key="big")
    turn = m.Turn.objects.get(session=session)

    def grow(n_messages: int) -> None:
        start = m.Message.objects.filter(session=session).count()
        m.Message.objects.bulk_create(
            m.Message(
                session=session,
                generation=0,
                index=start + i,
                turn_id=turn.pk,
                role="user",
                data={"role": "user", "text": f"bulk {start + i}"},
            )
            for i in range(n_messages)
        )
        seq = session.events.count() + 1000 * start
        m.Event.objects.bulk_create(
            m.Event(
                session=session,
                generation=0,
                seq=seq + i,
                turn_id=turn.pk,
                type="message.completed",
                data={"type": "message.completed", "text": "x"},
            )
            for i in range(n_messages)
        )

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(gen_url(session, 0))
        assert response.status_code == 200
        return len(ctx.captured_queries)

    grow(50)
    small = queries()
    grow(600)
    page = client.get(gen_url(session, 0)).content.decode()
    assert page.count('class="june-msg ') == 100 and "page 1 of 7" in page
    assert queries() == small
    last = client.get(gen_url(session, 0), {"page": 7}).content.decode()
    assert "bulk 652" in last or "bulk 651" in last


def test_the_session_page_lists_branches_with_their_fork_point(client, people, q2_sync):
    """Branches are generations too: the session page lists them (state, where each forked) and
    each opens on its own generation page; the owner's archive lists the resets only."""
    from sessions_app import selectors

    alice, _ = people
    services.turn_start(agent="ops", key="b1", text="hello", user=alice)
    services.turn_start(agent="ops", key="b1", text="how are you", user=alice)
    services.branch_fork(agent="ops", key="b1", at=2, text="how old are you", user=alice)
    session = m.Session.objects.get(key="b1")
    assert session.generation == 1
    staff_client(client, people)
    page = client.get(reverse("admin:sessions_app_session_change", args=[session.pk])).content.decode()
    rows = re.findall(r'data-generation="(\d+)">.*?<td>(\w+)</td>\s*<td class="june-branch">([^<]*)</td>', page, re.S)
    assert rows == [("1", "live", "g0 at message 2"), ("0", "branch", "")]
    g1 = client.get(gen_url(session, 1)).content.decode()
    assert "how old are you" in g1 and "hello" in g1 and "how are you" not in g1
    assert selectors.archived_generations(session=session) == []
