"""Authorization holes found by the hardening review (issue 13, items 1 and 2), pinned."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents_app.runtime.errors import ResumeAuthorizationError
from sessions_app import models as m
from sessions_app import services
from sessions_app.site_errors import AccessDenied

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def staff():
    return get_user_model().objects.create_user("sam", password="pw-sam-12345", is_staff=True)


@pytest.fixture
def ownerless(q2_sync):
    """A webhook-like session with a parked operator-only refund."""
    rec = services.turn_start(
        agent="ops",
        key="webhook:hook-1",
        text="refund order 7 10",
        user=None,
        source="webhook",
        speaker={"id": "webhook:monitor", "name": "monitor", "attested": True},
    )
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended" and turn.session.owner_id is None
    return turn


def test_staff_cannot_reach_an_ownerless_session_over_user_transports(ownerless, staff):
    """Staff without the operators grant could POST turns into a webhook session (the turn ran
    as source http, without the webhook's deny_tools) and reset it, cancelling a parked
    operator-only refund. Ownerless sessions are reachable by nobody over the API, the
    websocket or the chat page; staff act on them in the admin."""
    key = ownerless.session.key
    for call in (
        lambda: services.turn_start(agent="ops", key=key, text="order 5 mugs", user=staff, source="http"),
        lambda: services.session_reset(agent="ops", key=key, user=staff),
        lambda: services.turn_cancel(turn_id=ownerless.pk, agent="ops", key=key, user=staff),
        lambda: services.turn_resume(
            turn_id=ownerless.pk, input_id="approve-refund", answer=True, user=staff, agent="ops", key=key
        ),
    ):
        with pytest.raises(AccessDenied):
            call()
    ownerless.refresh_from_db()
    assert ownerless.status == "suspended" and m.Turn.objects.filter(session=ownerless.session).count() == 1

    client = Client()
    client.force_login(staff)
    r = client.post(
        f"/api/agents/ops/sessions/{key}/turns",
        data=json.dumps({"text": "order 5 mugs"}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN="x",
    )
    assert r.status_code in (403, 404) and r["Content-Type"].startswith("application/json")
    r = client.post(f"/api/agents/ops/sessions/{key}/reset", content_type="application/json")
    assert r.status_code in (403, 404)
    r = client.get(f"/agents/ops/sessions/{key}/")
    assert r.status_code in (403, 404)
    ownerless.refresh_from_db()
    assert ownerless.status == "suspended" and m.Turn.objects.filter(session=ownerless.session).count() == 1


def test_a_parked_ownerless_request_is_answered_only_under_its_policy(ownerless, staff):
    """The admin path (no session access check) still applies the answer policy: staff who are
    not operators are refused; an operator answers."""
    with pytest.raises(ResumeAuthorizationError):
        services.turn_resume(
            turn_id=ownerless.pk,
            input_id="approve-refund",
            answer=True,
            user=staff,
            via="admin",
            check_session_access=False,
        )
    from django.contrib.auth.models import Group

    staff.groups.add(Group.objects.get_or_create(name="operators")[0])
    services.turn_resume(
        turn_id=ownerless.pk,
        input_id="approve-refund",
        answer=True,
        user=staff,
        via="admin",
        check_session_access=False,
    )
    ownerless.refresh_from_db()
    assert ownerless.status == "completed"


def test_a_user_cannot_squat_a_schedules_session_key():
    """A user who created ``ops-inbox`` (the demo schedule's session) before the schedule first
    fired received the proactive turns meant for ``demo``. A schedule's session key belongs to
    its declared owner: nobody else can create it."""
    mallory = get_user_model().objects.create_user("mallory", password="pw-mallory-1")
    demo = get_user_model().objects.create_user("demo", password="pw-demo-12345")
    with pytest.raises(AccessDenied):
        services.session_for_user(agent="ops", key="ops-inbox", user=mallory, create=True)
    assert not m.Session.objects.filter(key="ops-inbox").exists()
    session = services.session_for_user(agent="ops", key="ops-inbox", user=demo, create=True)
    assert session.owner == demo


def test_a_schedule_declared_after_its_agent_loaded_reserves_its_keys_at_once(monkeypatch):
    """The schedules' session patterns are kept per agent (a new session's first message
    validated every declaration: 0.3 ms), and made again when the declarations change."""
    from sessions_app import wiring

    mallory = get_user_model().objects.create_user("mallory", password="pw-mallory-1")
    services.session_for_user(agent="ops", key="vip-2026-01-01", user=mallory, create=True)  # free yet
    ops = wiring.agent("ops")
    decl = dict(ops.schedules[0], name="vip", session="vip-{date}", owner="demo")
    monkeypatch.setattr(ops, "schedules", [*ops.schedules, decl])
    with pytest.raises(AccessDenied, match="belongs to a schedule"):
        services.session_for_user(agent="ops", key="vip-2026-01-02", user=mallory, create=True)
    ops.schedules[-1]["session"] = "gold-{date}"  # changed in place: seen too
    services.session_for_user(agent="ops", key="vip-2026-01-02", user=mallory, create=True)
    with pytest.raises(AccessDenied, match="belongs to a schedule"):
        services.session_for_user(agent="ops", key="gold-2026-01-02", user=mallory, create=True)


def test_a_new_session_in_autocommit_opens_no_transaction_and_a_duplicate_finds_the_first(monkeypatch):
    """Outside a transaction the session's INSERT is its own (no BEGIN and COMMIT round trips);
    a duplicate key (a concurrent first message) returns the session the other one made, and
    inside a caller's transaction leaves that transaction usable."""
    from django.db import connection, transaction

    from sessions_app.access import _create_session

    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    switched: list[bool] = []
    set_autocommit = connection.set_autocommit
    monkeypatch.setattr(connection, "set_autocommit", lambda on, **kw: (switched.append(on), set_autocommit(on, **kw)))
    made = services.session_for_user(agent="ops", key="fresh-1", user=alice, create=True)
    assert made.owner == alice and switched == []
    assert _create_session("ops", "fresh-1", alice).pk == made.pk  # the duplicate: the first one
    with transaction.atomic():
        assert _create_session("ops", "fresh-1", alice).pk == made.pk
        assert m.Session.objects.filter(key="fresh-1").count() == 1  # the transaction still works
    monkeypatch.undo()


def test_a_schedule_refuses_a_session_someone_else_owns(monkeypatch):
    """A session of the schedule's key made by another user (before the reservation existed)
    is never delivered into: the run fails loudly instead."""
    from agents_app.models import ScheduleRun
    from sessions_app.proactive.schedules import fire, schedules_sync

    mallory = get_user_model().objects.create_user("mallory", password="pw-mallory-1")
    get_user_model().objects.create_user("demo", password="pw-demo-12345")
    squatted = m.Session.objects.create(agent="ops", key="ops-inbox", owner=mallory)
    schedules_sync()
    with pytest.raises(Exception, match="belongs to another user"):
        fire("ops", "daily-summary")
    assert not m.Turn.objects.filter(session=squatted).exists()
    assert ScheduleRun.objects.get().status == "failed"


def test_a_user_cannot_squat_a_webhooks_session_key(q2_sync, client):
    """The same trick blocked a future webhook key (the webhook then got 403): webhook sessions
    live under ``webhook:``, a namespace users cannot create."""
    mallory = get_user_model().objects.create_user("mallory", password="pw-mallory-1")
    with pytest.raises(AccessDenied):
        services.session_for_user(agent="ops", key="webhook:hook-9", user=mallory, create=True)
    services.session_for_user(agent="ops", key="hook-9", user=mallory, create=True)  # her own key
    assert services.webhook_session_key("hook-9") == "webhook:hook-9"
