"""An approval inbox row's answer column: Approve and Deny in the list itself; and its Take over."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html

APPROVE_STYLE = "background:#2e7d32;color:#fff;border:0;border-radius:4px;padding:4px 12px;cursor:pointer"
DENY_STYLE = "background:#ba2121;color:#fff;border:0;border-radius:4px;padding:4px 12px;cursor:pointer"


TAKE_OVER_STYLE = "background:none;border:1px solid currentColor;border-radius:4px;padding:3px 10px;cursor:pointer"


def take_over_button(turn: Any, *, holder: str | None, allowed: bool) -> Any:
    """The inbox row's Take over (a person answers the user in the agent's place): a button of
    ``june-takeover-<turn>``, an empty form the inbox template renders after the list, posting
    to the session's takeover (a reply in progress is cancelled) and on to its live panel; who
    holds it when someone does; nothing when the agent's ``authorize_takeover`` says no."""
    if holder is not None:
        return format_html('<span class="june-taken-over">taken over by {}</span>', holder)
    if not allowed:
        return ""
    return format_html(
        '<button type="submit" form="june-takeover-{}" class="june-inbox-take-over" style="{}">Take over</button>',
        turn.pk,
        TAKE_OVER_STYLE,
    )


def inline_answer(turn: Any, kind: str) -> Any:
    """A yes/no request's Approve and Deny buttons in its inbox row; any other request links to
    its form. The row sits inside the changelist's own form, and forms do not nest: the buttons
    belong (``form=``) to ``june-answer-<turn>``, an empty form the inbox template renders after
    the list with its CSRF token, posting to the request's page and back to the inbox."""
    spec = (turn.pending or {}).get("request") or {}
    if kind != "boolean" or not spec.get("id"):
        url = reverse("admin:sessions_app_approvalrequest_change", args=(quote(turn.pk),))
        return format_html('<a href="{}">Answer…</a>', url)
    form = f"june-answer-{turn.pk}"
    return format_html(
        '<span class="june-inline-answer" style="display:flex;gap:.5em">'
        '<input type="hidden" form="{}" name="input_id" value="{}"><input type="hidden" form="{}" name="from" value="inbox">'
        '<button type="submit" form="{}" name="decision" value="approve" class="june-approve" style="{}">Approve</button>'
        '<button type="submit" form="{}" name="decision" value="deny" class="june-deny" style="{}">Deny</button></span>',
        form,
        spec["id"],
        form,
        form,
        APPROVE_STYLE,
        form,
        DENY_STYLE,
    )
