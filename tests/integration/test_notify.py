"""Notifications (sessions_app/notify.py) against a real SMTP server (aiosmtpd) and a local HTTP
receiver: one email per park to the people who may answer (not to staff without the grant),
none once answered, a reminder after the delay, the webhook retried after its receiver comes
back, a failure given up after its attempts."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from asgiref.sync import async_to_sync
from django.utils import timezone

from sessions_app import models as m
from sessions_app import notify

from .test_api import make_user
from .test_cancel_rules import parked

pytestmark = pytest.mark.django_db(transaction=True)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], str]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.messages.append((list(envelope.rcpt_tos), envelope.content.decode("utf-8", "replace")))
        return "250 OK"


@pytest.fixture
def smtp(settings):
    inbox = Inbox()
    port = _port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.JUNE_NOTIFY_WEBHOOK = ""
    settings.JUNE_SITE_URL = "https://june.example"
    yield inbox
    controller.stop()


class Receiver:
    """A chat webhook: answers 503 while ``down``, else 200, keeping the bodies."""

    def __init__(self) -> None:
        self.down = True
        self.bodies: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if outer.down:
                    self.send_response(503)
                else:
                    outer.bodies.append(body)
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def operators():
    boss = make_user("boss", operator=True)
    boss.is_staff, boss.email = True, "boss@shop.test"
    boss.save()
    clerk = make_user("clerk")  # staff, but not an operator: no grant for refunds
    clerk.is_staff, clerk.email = True, "clerk@shop.test"
    clerk.save()
    return boss, clerk


def test_a_park_emails_who_may_answer_once_and_reminds_after_the_delay(smtp, settings, monkeypatch):
    monkeypatch.setenv("JUNE_DEMO_DELAY", "0")
    settings.JUNE_NOTIFY_REMIND_AFTER = 600
    alice = make_user("alice")
    operators()
    turn = async_to_sync(parked)(alice, "n1", "refund order 42 10")
    now = timezone.now()
    notify.tick(now, force=True)
    notify.tick(now, force=True)  # a second pass (or another worker's) writes and sends nothing twice
    assert [to for to, _ in smtp.messages] == [["boss@shop.test"]]
    body = smtp.messages[0][1]
    assert "Approve a $10.00 refund on order 42?" in body and "ops / n1" in body
    assert f"https://june.example/admin/sessions_app/approvalrequest/{turn}/change/" in body
    notify.tick(now + timedelta(seconds=601), force=True)
    assert len(smtp.messages) == 2 and "Reminder: Approval needed" in smtp.messages[1][1]
    notify.tick(now + timedelta(seconds=5000), force=True)
    assert len(smtp.messages) == 2  # one reminder


def test_nothing_is_sent_for_a_request_answered_before_its_notification_went_out(smtp, monkeypatch):
    monkeypatch.setenv("JUNE_DEMO_DELAY", "0")
    alice = make_user("alice")
    boss, _ = operators()
    turn = async_to_sync(parked)(alice, "n2", "refund order 7 5")
    notify.plan(timezone.now())  # written, not yet sent
    from sessions_app import services

    services.turn_resume(turn_id=turn, input_id="approve-refund", answer=True, user=boss, agent="ops", key="n2",
                         via="admin", check_session_access=False)  # as the admin inbox answers
    counts = notify.send_due(timezone.now())
    assert counts["skipped"] == 1 and smtp.messages == []
    assert m.Notification.objects.get().state == "skipped"


def test_the_webhook_is_retried_until_its_receiver_answers(smtp, settings, monkeypatch):
    monkeypatch.setenv("JUNE_DEMO_DELAY", "0")
    receiver = Receiver()
    settings.JUNE_NOTIFY_WEBHOOK = receiver.url
    alice = make_user("alice")
    operators()
    async_to_sync(parked)(alice, "n3", "refund order 9 3")
    now = timezone.now()
    notify.tick(now, force=True)
    row = m.Notification.objects.get(channel="webhook")
    assert row.state == "pending" and row.attempts == 1 and "503" in row.last_error
    notify.tick(now + timedelta(seconds=1), force=True)  # not due yet: backoff
    assert m.Notification.objects.get(pk=row.pk).attempts == 1
    receiver.down = False
    notify.tick(now + timedelta(seconds=11), force=True)
    row.refresh_from_db()
    assert row.state == "sent" and row.attempts == 2
    [body] = receiver.bodies
    assert "Approve a $3.00 refund on order 9?" in body["text"]  # Slack/Teams: {"text": ...}


def test_a_notification_is_given_up_after_its_attempts(smtp, settings, monkeypatch):
    monkeypatch.setenv("JUNE_DEMO_DELAY", "0")
    settings.JUNE_NOTIFY_MAX_ATTEMPTS = 2
    settings.JUNE_NOTIFY_WEBHOOK = f"http://127.0.0.1:{_port()}/nobody"
    alice = make_user("alice")
    async_to_sync(parked)(alice, "n4", "refund order 1 1")
    now = timezone.now()
    notify.tick(now, force=True)
    notify.tick(now + timedelta(hours=2), force=True)
    row = m.Notification.objects.get(channel="webhook")  # no reminder after a notice never sent
    assert row.state == "failed" and row.attempts == 2 and row.last_error


def test_the_outbox_is_read_only_in_the_admin(smtp, client, monkeypatch):
    monkeypatch.setenv("JUNE_DEMO_DELAY", "0")
    alice = make_user("alice")
    boss, _ = operators()
    async_to_sync(parked)(alice, "n5", "refund order 2 2")
    notify.tick(timezone.now(), force=True)
    boss.is_superuser = True
    boss.save()
    client.force_login(boss)
    page = client.get("/admin/sessions_app/notification/")
    assert page.status_code == 200 and "boss@shop.test" in page.content.decode()
    assert client.get("/admin/sessions_app/notification/add/").status_code == 403
