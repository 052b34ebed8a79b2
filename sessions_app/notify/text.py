"""The text of a notification, per channel: what a user wrote (a request's prompt, a failure's
detail) is quoted, never markup. Slack's incoming webhooks read ``&``, ``<`` and ``>`` as control
characters (``<!channel>`` pings everyone, ``<https://…|Approve>`` is a link whose text hides its
address), so a webhook's text has them escaped as Slack documents (``&amp;``, ``&lt;``, ``&gt;``);
a mail is plain text, where they are inert."""

from __future__ import annotations

WEBHOOK = "webhook"


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def for_channel(text: str, channel: str) -> str:
    """``text`` (anyone's) as it may appear in a notification on ``channel``."""
    return slack_escape(text) if channel == WEBHOOK else text


def quoted(text: str, channel: str) -> str:
    """A user's text as a quotation: each line after ``> `` (Slack shows a quote block; a mail
    reader a quotation), so nothing in it reads as the notification's own words."""
    return "\n".join("> " + for_channel(line, channel) for line in (text.splitlines() or [""]))
