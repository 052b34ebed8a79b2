"""Notifications as an attacker's channel, with a real SMTP server and a real HTTP receiver
(tests/integration/test_notify.py's fixtures).

``refund order <!channel>*URGENT*<https://evil.example/approve?t=1|Approve_in_the_inbox> 10``
reached the site's Slack webhook verbatim (an @channel ping, and a link whose text hid its
address), ``<!here>`` too; and 300 parked bulk orders by one user made 305 posts. Every text a
notification quotes is now escaped for Slack on the webhook (``&``, ``<``, ``>``) and quoted in
both channels, and one user's parks are notified at most ``JUNE_NOTIFY_PARKS_PER_USER_HOUR``
times an hour."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from sessions_app import models as m
from sessions_app import services
from sessions_app.notify.outbox import notify_failure
from sessions_app.notify.sender import notify_tick
from tests.integration.test_notify import q2_sync, receiver, smtp, users  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

#: one word (the demo agent's order id is ``\S+``): an @channel, a disguised link, @here, a user ping
MARKUP = "<!channel>*URGENT*<https://evil.example/approve?t=1|Approve_in_the_inbox>&<!here><@U123>"


def _no_markup(text: str) -> None:
    for raw in ("<!channel>", "<!here>", "<https://evil", "<@U123>", "|Approve_in_the_inbox>"):
        assert raw not in text, (raw, text)


def _park(user, key: str, text: str) -> m.Turn:
    rec = services.turn_start(agent="ops", key=key, text=text, user=user)
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    return turn


def test_slack_markup_in_a_request_and_a_failure_is_escaped_on_the_webhook(q2_sync, users, smtp, receiver):
    """The request's text (the park, its reminder) and a failure's detail (the digest) reach the
    webhook with Slack's control characters escaped and the user's words quoted; the mail
    quotes them as plain text, under the inbox link that is the notification's own."""
    receiver.up()
    turn = _park(users["alice"], "r1", f"refund order {MARKUP} 10")
    assert "<!channel>" in str(turn.pending), turn.pending  # the prompt quotes the user's order
    notify_failure("turn failed", f"ops: turn x: {MARKUP}", key="failure:probe")
    notify_tick()
    texts = [b["text"] for b in receiver.bodies]
    assert len(texts) == 2, texts
    for text in texts:
        _no_markup(text)
        assert "&lt;!channel&gt;" in text and "&amp;" in text
    park = next(t for t in texts if "An answer is needed" in t)
    assert "\n> " in park and "Answer it in the inbox: https://june.example/" in park
    mail = next(body for to, body in smtp.mails if "olga@example.com" in to)
    assert "\n> " in mail and "<!channel>" in mail  # plain text: inert, and quoted


def test_one_users_parks_are_notified_a_bounded_number_of_times_an_hour(q2_sync, users, smtp, receiver, settings):
    """Eight parked requests of one user: three notified (webhook posts and mails), the rest
    wait in the inbox; another user's park is notified all the same."""
    settings.JUNE_NOTIFY_PARKS_PER_USER_HOUR = 3
    receiver.up()
    for n in range(8):
        _park(users["alice"], f"bulk{n}", f"refund order {40 + n} 10")
    bob = get_user_model().objects.create_user("bob", password="pw-bob-12345")
    _park(bob, "other", "refund order 99 10")
    notify_tick()
    notify_tick()  # a second pass within the hour writes nothing more for alice
    assert len(receiver.bodies) == 4, [b["text"][:60] for b in receiver.bodies]
    assert sum("order 99" in b["text"] for b in receiver.bodies) == 1
    assert m.Notification.objects.filter(kind="park", channel="webhook").count() == 4
