"""Notifications with a real SMTP server (aiosmtpd) and a real local HTTP receiver: one mail
per park to the users who may answer it, none after it was answered, a reminder after the
delay, a digest for 10 failures, retries after the receiver comes back."""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from sessions_app import models as m
from sessions_app import services
from sessions_app.notify.outbox import notify_failure
from sessions_app.notify.sender import notify_tick

pytestmark = pytest.mark.django_db(transaction=True)


class Inbox:
    def __init__(self) -> None:
        self.mails: list[tuple[list[str], str]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.mails.append((list(envelope.rcpt_tos), envelope.content.decode("utf-8", "replace")))
        return "250 OK"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp(settings):
    inbox = Inbox()
    ctl = Controller(inbox, hostname="127.0.0.1", port=_port())
    ctl.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", ctl.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield inbox
    ctl.stop()


class Receiver:
    """A local HTTP receiver on a fixed port, which can go down and come back."""

    def __init__(self) -> None:
        self.port = _port()
        self.bodies: list[dict] = []
        self.server: ThreadingHTTPServer | None = None

    def up(self) -> None:
        bodies = self.bodies

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def receiver(monkeypatch, settings):
    r = Receiver()
    settings.JUNE_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{r.port}/hook"
    settings.JUNE_NOTIFY_BASE_URL = "https://june.example"
    yield r
    r.down()


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def users():
    make = get_user_model().objects.create_user
    operators = Group.objects.create(name="operators")
    olga = make("olga", email="olga@example.com", password="pw-olga-123", is_staff=True)
    otto = make("otto", email="otto@example.com", password="pw-otto-123", is_staff=True)
    for u in (olga, otto):
        u.groups.add(operators)
    return {
        "alice": make("alice", email="alice@example.com", password="pw-alice-123"),
        "olga": olga,
        "otto": otto,
        # staff without the operator grant: never mailed
        "sam": make("sam", email="sam@example.com", password="pw-sam-123", is_staff=True),
        "root": get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123"),
    }


@pytest.fixture
def parked(q2_sync, users) -> m.Turn:
    rec = services.turn_start(agent="ops", key="r1", text="refund order 42 10", user=users["alice"])
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    return turn


def test_one_mail_per_park_to_the_answerers_only_with_a_link(parked, smtp, receiver):
    receiver.up()
    out = notify_tick()
    assert out["sent"] == 2, out  # one mail (both operators), one webhook post
    assert len(smtp.mails) == 1
    to, content = smtp.mails[0]
    assert sorted(to) == ["olga@example.com", "otto@example.com"]  # not sam, alice nor root
    assert f"https://june.example/admin/sessions_app/approvalrequest/{parked.pk}/change/" in content
    assert len(receiver.bodies) == 1 and "Answer it in the inbox" in receiver.bodies[0]["text"]
    # once per park: later ticks send nothing more
    for _ in range(3):
        assert notify_tick()["sent"] == 0
    assert len(smtp.mails) == 1 and len(receiver.bodies) == 1
    rows = m.Notification.objects.filter(turn_id=parked.pk)
    assert sorted(rows.values_list("state", flat=True)) == ["sent", "sent"]


def test_no_mail_after_the_park_was_answered(parked, smtp, users, monkeypatch, settings):
    settings.JUNE_NOTIFY_WEBHOOK_URL = ""
    from sessions_app.notify.outbox import notify_parks

    assert notify_parks() == 1  # the row is written...
    services.turn_resume(
        turn_id=parked.pk,
        input_id="approve-refund",
        answer=False,
        user=users["olga"],
        via="admin",
        check_session_access=False,
    )
    parked.refresh_from_db()
    assert parked.status != "suspended"
    out = notify_tick()  # ...but the park is answered before it goes out
    assert out["skipped"] == 1 and out["sent"] == 0 and smtp.mails == []
    assert m.Notification.objects.get(turn_id=parked.pk).state == "skipped"


def test_a_reminder_after_the_delay(parked, smtp, monkeypatch, settings):
    settings.JUNE_NOTIFY_WEBHOOK_URL = ""
    settings.JUNE_NOTIFY_REMIND_AFTER = 600.0
    notify_tick()
    assert len(smtp.mails) == 1
    notify_tick(now=timezone.now() + dt.timedelta(seconds=300))  # not yet
    assert len(smtp.mails) == 1
    later = timezone.now() + dt.timedelta(seconds=601)
    assert notify_tick(now=later)["sent"] == 1
    assert len(smtp.mails) == 2 and "Reminder" in smtp.mails[1][1]
    notify_tick(now=later + dt.timedelta(seconds=5000))  # one reminder per park
    assert len(smtp.mails) == 2


def test_ten_failures_make_one_digest(smtp, users, receiver, monkeypatch, settings):
    settings.JUNE_NOTIFY_DIGEST_SECONDS = 900.0
    receiver.up()
    for i in range(10):
        notify_failure("turn failed", f"turn t{i} failed: boom {i}")
    out = notify_tick()
    assert out["folded"] == 10 and out["sent"] == 2, out
    assert len(smtp.mails) == 1 and smtp.mails[0][0] == ["root@example.com"]
    assert "10 failure(s)" in smtp.mails[0][1] and "boom 9" in smtp.mails[0][1]
    assert len(receiver.bodies) == 1 and "boom 0" in receiver.bodies[0]["text"]
    # more failures within the digest window wait for the next one
    notify_failure("worker gone", "w1 missed 3 beats")
    assert notify_tick()["folded"] == 0 and len(smtp.mails) == 1
    out = notify_tick(now=timezone.now() + dt.timedelta(seconds=901))
    assert out["folded"] == 1 and len(smtp.mails) == 2 and "w1 missed" in smtp.mails[1][1]


def test_webhook_retried_with_backoff_until_the_receiver_comes_back(parked, smtp, receiver, monkeypatch, settings):
    settings.JUNE_NOTIFY_EMAIL = False
    settings.JUNE_NOTIFY_BACKOFF = 10.0
    out = notify_tick()  # the receiver is down
    assert out["retry"] == 1 and out["sent"] == 0
    row = m.Notification.objects.get(turn_id=parked.pk)
    assert row.attempts == 1 and row.state == "pending" and "Error" in row.last_error
    t0 = timezone.now()
    assert notify_tick(now=t0)["retry"] == 0  # not due before its backoff
    assert notify_tick(now=t0 + dt.timedelta(seconds=11))["retry"] == 1
    row.refresh_from_db()
    assert row.attempts == 2 and row.next_at >= t0 + dt.timedelta(seconds=11 + 19)  # doubled
    receiver.up()
    assert notify_tick(now=t0 + dt.timedelta(seconds=60))["sent"] == 1
    row.refresh_from_db()
    assert row.state == "sent" and len(receiver.bodies) == 1


def test_given_up_after_max_attempts(parked, receiver, monkeypatch, settings):
    settings.JUNE_NOTIFY_EMAIL = False
    settings.JUNE_NOTIFY_MAX_ATTEMPTS = 2
    settings.JUNE_NOTIFY_BACKOFF = 1.0
    notify_tick()
    out = notify_tick(now=timezone.now() + dt.timedelta(seconds=5))
    assert out["failed"] == 1
    assert m.Notification.objects.get(turn_id=parked.pk).state == "failed"


def test_the_admin_lists_rows_read_only_for_staff(parked, users, monkeypatch, settings):
    from django.test import Client
    from django.urls import reverse

    settings.JUNE_NOTIFY_EMAIL = False
    settings.JUNE_NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/<b>x"  # nothing listens
    notify_tick()
    url = reverse("admin:sessions_app_notification_changelist")
    staff = Client()
    staff.force_login(users["sam"])
    r = staff.get(url)
    assert r.status_code == 200
    html = r.content.decode()
    assert "pending" in html and "URLError" in html
    row = m.Notification.objects.get()
    assert (
        staff.post(reverse("admin:sessions_app_notification_delete", args=(row.pk,)), {"post": "yes"}).status_code
        == 403
    )
    assert m.Notification.objects.filter(pk=row.pk).exists()
    anon = Client()
    assert anon.get(url).status_code == 302  # to the login page
    plain = Client()
    plain.force_login(users["alice"])
    assert plain.get(url).status_code == 302


def test_failed_turns_a_given_up_delivery_and_a_gone_worker_reach_one_digest(
    q2_sync, smtp, users, monkeypatch, settings
):
    from agents_app.models import DeliveryStatus, WebhookDelivery

    settings.JUNE_NOTIFY_WEBHOOK_URL = ""
    ids = [services.turn_start(agent="ops", key=f"f{i}", text="hello", user=users["alice"]).turn_id for i in range(10)]
    # the store's own write when a turn fails (a model error, its retries spent): it sets the
    # turn's end, and leaves ``updated_at`` where the turn's creation put it
    long_ago = timezone.now() - dt.timedelta(days=2)
    m.Turn.objects.filter(pk__in=ids).update(
        status="failed",
        error={"type": "ModelError", "message": "overloaded"},
        updated_at=long_ago,
        ended_at=timezone.now(),
    )
    stale = services.turn_start(agent="ops", key="f-old", text="hello", user=users["alice"]).turn_id
    # a failure that ended before the look back was notified then (or not at all): not again
    m.Turn.objects.filter(pk=stale).update(status="failed", updated_at=timezone.now(), ended_at=long_ago)
    WebhookDelivery.objects.create(
        agent="ops",
        session_key="webhook:x",
        turn_id="t-dlv",
        url="https://h.example/x",
        status=DeliveryStatus.FAILED,
        attempts=8,
        last_error="HTTP 503",
    )
    old = timezone.now() - dt.timedelta(seconds=60)
    m.WorkerBeat.objects.create(id="host:123", started_at=old, seen_at=old)
    m.WorkerBeat.objects.create(id="host:456", started_at=old, seen_at=timezone.now())  # alive
    out = notify_tick()
    assert out["failures"] == 12 and out["folded"] == 12 and out["sent"] == 1, out
    assert len(smtp.mails) == 1
    body = smtp.mails[0][1]
    assert "12 failure(s)" in body and body.count("turn failed") == 10 and "overloaded" in body
    assert "webhook delivery given up" in body and "host:123" in body and "host:456" not in body
    # each failure once: the next digest window finds nothing new
    later = timezone.now() + dt.timedelta(seconds=901)
    m.WorkerBeat.objects.filter(pk="host:456").update(seen_at=later)  # still beating then
    assert notify_tick(now=later)["failures"] == 0
    assert len(smtp.mails) == 1


def test_a_schedule_failing_n_times_in_a_row(smtp, users, monkeypatch, settings):
    from agents_app.models import ScheduleRun

    settings.JUNE_NOTIFY_WEBHOOK_URL = ""
    settings.JUNE_NOTIFY_SCHEDULE_FAILURES = 3
    t0 = timezone.now() - dt.timedelta(hours=1)

    def run(i: int, status: str) -> None:
        ScheduleRun.objects.create(
            schedule="june:ops:daily",
            agent="ops",
            tick=t0 + dt.timedelta(minutes=i),
            session_key="ops-inbox",
            turn_id=f"s{i}",
            status=status,
        )

    run(0, "delivered")
    run(1, "failed")
    run(2, "failed")
    assert notify_tick()["failures"] == 0  # two in a row is not yet three
    run(3, "failed")
    out = notify_tick()
    assert out["failures"] == 1 and out["sent"] == 1
    assert "schedule failing" in smtp.mails[0][1] and "june:ops:daily" in smtp.mails[0][1]


def test_the_policy_s_own_webhook_over_the_site_s(q2_sync, users, smtp, receiver, monkeypatch, settings):
    from agents_app.runtime.notify import notify_config
    from sessions_app import wiring

    receiver.up()
    settings.JUNE_NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/site-wide-not-used"
    ops = wiring.agent("ops")
    monkeypatch.setattr(
        ops,
        "notify",
        notify_config(
            "ops",
            {
                "email": True,
                "policies": {"operator": {"webhook_url": f"http://127.0.0.1:{receiver.port}/ops", "email": False}},
            },
        ),
    )
    rec = services.turn_start(agent="ops", key="r2", text="refund order 42 10", user=users["alice"])
    out = notify_tick()
    assert out["sent"] == 1 and out["retry"] == 0, out
    assert smtp.mails == [] and len(receiver.bodies) == 1
    row = m.Notification.objects.get(turn_id=rec.turn_id)
    assert row.channel == "webhook" and row.recipients == [f"http://127.0.0.1:{receiver.port}/ops"]


def test_the_sweeper_thread_s_pass_sends_and_is_throttled(parked, smtp, settings, monkeypatch):
    from sessions_app.workers import watchdog

    settings.JUNE_NOTIFY_WEBHOOK_URL = ""
    settings.JUNE_NOTIFY_SECONDS = 3600
    monkeypatch.setattr(watchdog, "_notified_at", None)
    watchdog._notify_pass()
    assert len(smtp.mails) == 1
    m.Notification.objects.all().delete()
    watchdog._notify_pass()  # within JUNE_NOTIFY_SECONDS: no pass
    assert not m.Notification.objects.exists()
    settings.JUNE_NOTIFY_ENABLED = False
    monkeypatch.setattr(watchdog, "_notified_at", None)
    watchdog._notify_pass()  # turned off
    assert not m.Notification.objects.exists() and len(smtp.mails) == 1
