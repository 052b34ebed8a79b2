"""The staff archive and the turn page after compaction: every original message and every
summary is shown, the boundaries are marked, and the compaction step is explained."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents_app import providers
from agents_app.providers.demo import DemoModel
from agents_app.runtime import SessionRef
from sessions_app import models as m
from sessions_app import services
from sessions_app.store import DjangoSessionStore, eventlog

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def compacted(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)
    providers.register("demo", lambda agent: DemoModel(delay=0, essay_delay=0))
    user = get_user_model().objects.create_user("alice", password="pw-alice-123")
    try:
        for n in range(8):
            services.turn_start(agent="ops", key="long", text=f"essay {n}", user=user)
    finally:
        providers.unregister("demo")
    return m.Session.objects.get(agent="ops", key="long")


def test_the_archive_shows_every_message_and_marks_the_boundaries(client, compacted):
    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True)
    client.force_login(staff)
    summaries = list(m.Message.objects.filter(session=compacted, role="summary").order_by("index"))
    assert summaries and compacted.boundary == summaries[-1].data["boundary"]
    assert compacted.summary_index == summaries[-1].index
    url = reverse("admin:sessions_app_session_generation", args=[compacted.pk, compacted.generation])
    page = client.get(url).content.decode()
    # every original, and the summaries, are on the page (one page: fewer than its size)
    assert page.count('class="june-msg ') == m.Message.objects.filter(session=compacted).count()
    assert "essay 0" in page
    assert page.count('class="june-msg summary') == len(summaries)
    for s in summaries:
        assert f'data-boundary="{s.data["boundary"]}"' in page
    assert "compaction.completed" in page
    # the event log keeps no second copy of a summary: it refers to the message, restored on read
    assert sum(
        eventlog.refers(data)
        for data in m.Event.objects.filter(session=compacted, type="compaction.completed").values_list(
            "data", flat=True
        )
    ) == len(summaries)
    logged = [
        e.event
        for e in DjangoSessionStore().events_sync(SessionRef("ops", "long"))
        if e.event.type == "compaction.completed"
    ]
    assert [e.summary for e in logged] == [s.data["text"] for s in summaries]
    assert "Earlier in this conversation" in page
    turn = m.Turn.objects.get(pk=summaries[0].turn_id)
    page = client.get(reverse("admin:sessions_app_turn_change", args=[turn.pk])).content.decode()
    assert f"compact:{summaries[0].index}" in page and "messages summarized" in page
