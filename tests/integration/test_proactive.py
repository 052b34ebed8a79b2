"""Proactive turns through the Django path: the ops daily summary fired into the demo user's
inbox, one turn per tick, missed ticks fire once, a parked webhook turn keeps its policy, and
webhook deliveries are signed, retried with backoff and recorded (a local HTTP server)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from datetime import timezone as dt_timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django_q.models import Schedule

from agents_app.cron import prev_tick
from agents_app.models import DeliveryStatus, ScheduleRun, WebhookDelivery
from agents_app.runtime.errors import SessionSuspendedError
from agents_app.runtime.proactive import ChannelError, DeliveryError, receive
from agents_app.runtime.session import LocalDispatcher
from sessions_app import models as m
from sessions_app import services, wiring
from sessions_app.proactive.channels import WebhookChannel, sign
from sessions_app.proactive.schedules import declaration, fire, schedules_sync

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "s3cret-for-tests"
UTC = UTC


@pytest.fixture(autouse=True)
def env(monkeypatch, settings):
    settings.JUNE_WEBHOOK_SECRETS = {"OPS": SECRET}
    settings.JUNE_WEBHOOK_URLS = {}
    settings.JUNE_WEBHOOK_BACKOFF = 0.01
    settings.JUNE_WEBHOOK_RETRIES = 4


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def demo_user():
    return get_user_model().objects.create_user("demo", password="pw-demo-123")


def trigger_and_reply(session: m.Session) -> list[tuple[str, dict]]:
    return list(m.Message.objects.filter(session=session).order_by("index").values_list("role", "data"))


# -- schedules -----------------------------------------------------------------------------------


def test_deploy_sync_makes_the_q2_schedule_in_the_declared_time_zone():
    Schedule.objects.all().delete()
    now = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    report = schedules_sync(now=now)
    assert "june:ops:daily-summary" in report["created"]
    row = Schedule.objects.get(name="june:ops:daily-summary")
    assert (row.func, row.cron, row.schedule_type, row.repeats) == (
        "sessions_app.proactive.schedules.fire",
        "0 9 * * *",
        "C",
        -1,
    )
    # 09:00 in Paris in July is 07:00 UTC (the next one after noon UTC is tomorrow's)
    assert row.next_run == datetime(2026, 7, 2, 7, 0, tzinfo=UTC)
    # an admin's disable survives the next deploy; an undeclared schedule goes
    Schedule.objects.filter(pk=row.pk).update(repeats=0)
    Schedule.objects.create(
        name="june:ops:gone",
        func="sessions_app.proactive.schedules.fire",
        schedule_type="C",
        cron="* * * * *",
        kwargs="{'agent': 'ops', 'name': 'gone'}",
    )
    report = schedules_sync(now=now)
    assert report["removed"] == ["june:ops:gone"] and report["created"] == []
    assert Schedule.objects.get(name="june:ops:daily-summary").repeats == 0


def test_the_daily_summary_lands_in_the_demo_users_ops_inbox(demo_user):
    schedules_sync()
    intended = datetime.now(UTC).replace(second=0, microsecond=0).isoformat()
    assert fire("ops", "daily-summary", intended=intended) == "fired"
    session = m.Session.objects.get(agent="ops", key="ops-inbox")
    assert session.owner == demo_user and session.title == "Ops inbox"
    assert services.session_for_user(agent="ops", key="ops-inbox", user=demo_user) == session
    [(role0, trig), (role1, answer)] = trigger_and_reply(session)
    assert (role0, trig["text"], trig["by"]) == ("trigger", "summary of today", "cron:daily-summary")
    assert role1 == "assistant" and answer["text"].startswith("Daily summary")
    turn = m.Turn.objects.get(session=session)
    assert (turn.status, turn.kind, turn.source, turn.input["user"]) == ("completed", "proactive", "schedule", None)
    assert list(
        m.Event.objects.filter(session=session, type="turn.started").values_list("data__trigger", flat=True)
    ) == ["proactive"]
    run = ScheduleRun.objects.get()
    assert (run.turn_id, run.status, run.session_key) == (turn.pk, "delivered", "ops-inbox")
    # the next run is the declared zone's 09:00
    nxt = Schedule.objects.get(name="june:ops:daily-summary").next_run.astimezone(
        declaration("ops", "daily-summary").tz()
    )
    assert (nxt.hour, nxt.minute) == (9, 0) and nxt > datetime.now(UTC)


def test_a_tick_fired_twice_starts_one_turn(demo_user):
    schedules_sync()
    intended = datetime.now(UTC).isoformat()
    assert fire("ops", "daily-summary", intended=intended) == "fired"
    assert fire("ops", "daily-summary", intended=intended) == "duplicate"
    assert m.Turn.objects.count() == 1 and ScheduleRun.objects.count() == 1


def test_concurrent_firings_of_one_tick_start_one_turn(demo_user):
    """Two clusters on SQLite both enqueue a due schedule (select_for_update is a no-op there)."""
    schedules_sync()
    intended = datetime.now(UTC).isoformat()
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def go() -> None:
        from django.db import connections

        barrier.wait()
        try:
            results.append(fire("ops", "daily-summary", intended=intended))
        except Exception as exc:  # pragma: no cover - shown in the assertion
            results.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(map(str, results)) == ["duplicate", "fired"]
    assert m.Turn.objects.count() == 1 and ScheduleRun.objects.count() == 1


def test_missed_ticks_after_downtime_fire_once(demo_user):
    """Catch-up firings (one per missed interval) collapse into the latest tick: one turn."""
    schedules_sync()
    now = datetime.now(UTC)
    tz = declaration("ops", "daily-summary").tz()
    latest = prev_tick("0 9 * * *", tz, now)
    missed = [latest - timedelta(days=d) for d in (3, 2, 1)]
    outcomes = [fire("ops", "daily-summary", intended=t.isoformat()) for t in missed]
    assert outcomes == ["fired", "duplicate", "duplicate"]
    [run] = ScheduleRun.objects.all()
    assert run.tick == latest and m.Turn.objects.count() == 1


def test_a_disabled_schedule_does_not_fire():
    schedules_sync()
    Schedule.objects.filter(name="june:ops:daily-summary").update(repeats=0)
    assert fire("ops", "daily-summary") == "disabled"
    assert m.Turn.objects.count() == 0


def test_a_schedule_into_a_parked_session_fails_loudly(q2_sync, demo_user):
    schedules_sync()
    services.turn_start(agent="ops", key="ops-inbox", text="refund order 1 5", user=demo_user)
    with pytest.raises(SessionSuspendedError):
        fire("ops", "daily-summary", intended=datetime.now(UTC).isoformat())
    run = ScheduleRun.objects.get()
    assert run.status == "failed" and "waiting for an answer" in run.error
    assert m.Turn.objects.count() == 1  # only the parked one


def test_a_fresh_session_per_run(monkeypatch, demo_user):
    ops = wiring.agent("ops")
    decl = dict(ops.schedules[0], name="dated", session="daily-{date}", owner=None)
    monkeypatch.setattr(ops, "schedules", [*ops.schedules, decl])
    schedules_sync()
    tick = datetime(2026, 3, 4, 8, 0, tzinfo=UTC)  # 09:00 in Paris
    with pytest.MonkeyPatch.context() as mp:  # a tick in the past that is not a catch-up
        mp.setattr("agents_app.cron.CATCH_UP_GRACE", timedelta(days=100_000))
        assert fire("ops", "dated", intended=tick.isoformat()) == "fired"
    session = m.Session.objects.get(key="daily-2026-03-04")
    assert session.owner is None and m.Turn.objects.get(session=session).status == "completed"


# -- policies through the Django path ------------------------------------------------------------------


class Recording:
    """Wraps the demo model and records what each model step was offered."""

    def __init__(self, inner: Any, seen: list) -> None:
        self.inner, self.seen = inner, seen

    def stream(self, request: Any) -> Any:
        self.seen.append((request.system, sorted(t.name for t in request.tools)))
        return self.inner.stream(request)


def signed_post(client, payload: dict) -> Any:
    body = json.dumps(payload).encode()
    ts = str(int(time.time()))
    return client.post(
        "/api/agents/ops/webhook",
        data=body,
        content_type="application/json",
        HTTP_X_JUNE_TIMESTAMP=ts,
        HTTP_X_JUNE_SIGNATURE=sign(SECRET.encode(), ts, body),
    )


def test_a_parked_webhook_turn_resumes_with_its_policy(client, q2_sync, monkeypatch):
    from django.contrib.auth.models import Group

    seen: list = []
    real = wiring.model_for
    monkeypatch.setattr(wiring, "model_for", lambda agent: Recording(real(agent), seen))
    r = signed_post(client, {"session": "hook-park", "text": "refund order 42 10", "user": "billing"})
    turn = m.Turn.objects.get(pk=r.json()["turn_id"])
    assert turn.status == "suspended"
    saved = wiring.agent("ops").policy_for("webhook")
    assert turn.policy == saved and turn.pending["policy"] == saved
    # the agent's instructions and policy change while the turn is parked ...
    ops = wiring.agent("ops")
    monkeypatch.setattr(ops, "overlays", {"webhook": "something else entirely"})
    monkeypatch.setattr(ops, "surfaces", {})
    operator = get_user_model().objects.create_user("olga", password="pw-olga-123", is_staff=True)
    operator.groups.add(Group.objects.create(name="operators"))
    services.turn_resume(
        turn_id=turn.pk, input_id="approve-refund", answer=True, user=operator, check_session_access=False, via="admin"
    )
    turn.refresh_from_db()
    assert turn.status == "completed", turn.error
    # ... and the resumed turn still runs under the policy it was started with
    assert len(seen) == 2 and seen[0] == seen[1]
    system, tools = seen[1]
    assert system == saved["system"] and "through a webhook" in system
    assert "create_order" not in tools and "issue_refund" in tools


# -- webhook delivery ----------------------------------------------------------------------------------


class Receiver:
    """A local HTTP server: fails the first ``failures`` POSTs with 500, then answers 200."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.received: list[tuple[dict, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                code = 500 if len(outer.received) <= outer.failures else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/june"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings):
    made: list[Receiver] = []

    def make(failures: int = 0) -> Receiver:
        rcv = Receiver(failures)
        made.append(rcv)
        settings.JUNE_WEBHOOK_URLS = {"OPS": rcv.url}
        return rcv

    yield make
    for rcv in made:
        rcv.close()


def test_a_webhook_turns_result_is_posted_signed_after_retries(client, q2_sync, receiver):
    rcv = receiver(failures=2)
    r = signed_post(client, {"session": "hook-d", "text": "stock mugs"})
    assert r.status_code == 202 and r.json()["delivery"] is not None
    delivery = WebhookDelivery.objects.get(pk=r.json()["delivery"])
    assert (delivery.status, delivery.attempts, delivery.response_status) == (DeliveryStatus.DELIVERED, 3, 200)
    assert "500" in delivery.last_error  # the failures are on record
    assert len(rcv.received) == 3
    headers, body = rcv.received[-1]
    assert headers["x-june-signature"] == sign(SECRET.encode(), headers["x-june-timestamp"], body)
    payload = json.loads(body)
    assert (payload["turn_id"], payload["status"], payload["session"]) == (r.json()["turn_id"], "completed", "hook-d")
    assert payload["text"].startswith("Done. lookup_stock")


def test_a_delivery_that_keeps_failing_is_recorded_and_shown_in_the_admin(client, q2_sync, receiver):
    rcv = receiver(failures=100)
    r = signed_post(client, {"session": "hook-f", "text": "hello"})
    delivery = WebhookDelivery.objects.get(pk=r.json()["delivery"])
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 4) and len(rcv.received) == 4
    assert m.Turn.objects.get(pk=delivery.turn_id).status == "completed"  # the turn is not lost
    staff = get_user_model().objects.create_superuser("root", password="pw-root-123")
    client.force_login(staff)
    page = client.get("/admin/agents_app/webhookdelivery/?status__exact=failed")
    assert page.status_code == 200 and delivery.turn_id in page.content.decode()
    # retry from the admin: the receiver is fixed now
    rcv.failures = 0
    client.post("/admin/agents_app/webhookdelivery/", {"action": "retry", "_selected_action": [delivery.pk]})
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.attempts == 5


async def _receive_webhook(turn_id: str | None = None) -> Any:
    rt = wiring.runtime(dispatcher=LocalDispatcher())
    return await receive(
        WebhookChannel("ops"),
        seed="summary of today",
        target={},
        trigger={"kind": "proactive", "by": "cron:hourly"},
        session=rt.session("ops", "hooked"),
        timeout=60,
    )


def test_receive_through_the_webhook_channel_posts_the_result(receiver):
    from asgiref.sync import async_to_sync

    rcv = receiver(failures=0)
    result = async_to_sync(_receive_webhook)()
    assert result.status == "completed" and len(rcv.received) == 1
    assert json.loads(rcv.received[0][1])["text"].startswith("Daily summary")
    assert WebhookDelivery.objects.get(turn_id=result.turn_id).status == DeliveryStatus.DELIVERED


def test_receive_raises_when_the_webhook_channel_cannot_deliver(receiver):
    from asgiref.sync import async_to_sync

    with pytest.raises(ChannelError, match="no webhook URL"):  # nothing configured: refused up front
        async_to_sync(_receive_webhook)()
    assert m.Turn.objects.count() == 0
    receiver(failures=100)
    with pytest.raises(DeliveryError) as info:  # configured but down: the settled turn is kept
        async_to_sync(_receive_webhook)()
    assert info.value.result.status == "completed"
    assert WebhookDelivery.objects.get(turn_id=info.value.result.turn_id).status == DeliveryStatus.FAILED


# -- the admin ---------------------------------------------------------------------------------------------


def test_the_schedule_admin_lists_next_and_last_run_and_toggles(client, demo_user):
    schedules_sync()
    fire("ops", "daily-summary", intended=datetime.now(UTC).isoformat())
    run = ScheduleRun.objects.get()
    staff = get_user_model().objects.create_superuser("root", password="pw-root-123")
    client.force_login(staff)
    page = client.get("/admin/agents_app/agentschedule/").content.decode()
    assert "june:ops:daily-summary" in page and run.turn_id in page and "june:deliveries" not in page
    row = Schedule.objects.get(name="june:ops:daily-summary")
    client.post("/admin/agents_app/agentschedule/", {"action": "disable", "_selected_action": [row.pk]})
    assert Schedule.objects.get(pk=row.pk).repeats == 0
    client.post("/admin/agents_app/agentschedule/", {"action": "enable", "_selected_action": [row.pk]})
    assert Schedule.objects.get(pk=row.pk).repeats == -1
