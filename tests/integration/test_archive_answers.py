"""The user's read-only archive shows who answered a parked request and how: it had no approval
record (no "Approved by operator", no edit or reject note) where the chat shows one."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app import listings, services
from sessions_app import models as m
from tests.integration.test_admin_inbox import parked, q2_sync, users  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_archive_shows_the_operators_approval(parked, users):
    services.turn_resume(
        turn_id=parked.pk,
        input_id="approve-refund",
        answer=True,
        user=users["olga"],
        via="admin",
        check_session_access=False,
    )
    parked.refresh_from_db()
    assert parked.status == "completed", parked.error
    services.session_reset(agent="ops", key="r1", user=users["alice"])
    web = Client()
    web.force_login(users["alice"])
    html = web.get("/agents/ops/sessions/r1/archive/0/").content.decode()
    assert '<div class="note approval-outcome">Approved by olga in the admin inbox.</div>' in html
    # after the request (the tool call) and before the reply that followed it
    assert html.index("approval-outcome") < html.index("refund_id")


@pytest.mark.parametrize(
    "answer,text",
    [
        (True, "Approved by olga in the admin inbox."),
        (False, "Denied by olga in the admin inbox."),
        ({"decision": "approve"}, "Approved by olga in the admin inbox."),
        (
            {"decision": "edit", "input": {"quantity": 20}},
            'Edited and approved by olga in the admin inbox: {"quantity": 20}',
        ),
        (
            {"decision": "reject", "message": "fifty is too many"},
            "Rejected by olga in the admin inbox: fifty is too many",
        ),
        ({"decision": "reject"}, "Rejected by olga in the admin inbox."),
    ],
)
def test_an_answer_in_words(answer, text):
    assert listings.answer_text(answer=answer, who="olga", via="admin") == text


def test_answers_of_one_generation_only(parked, users):
    services.turn_resume(
        turn_id=parked.pk,
        input_id="approve-refund",
        answer=False,
        user=users["olga"],
        via="admin",
        check_session_access=False,
    )
    session = m.Session.objects.get(key="r1")
    assert [a["text"] for a in listings.answers_in(session=session, generation=0)] == [
        "Denied by olga in the admin inbox."
    ]
    assert listings.answers_in(session=session, generation=1) == []
