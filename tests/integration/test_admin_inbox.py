"""The admin approval inbox, driven by Django's test client as staff users.

django-q2 runs in sync mode here (the resumed turn runs inline on commit); the real-worker
version of the same paths is tests/integration/test_hitl_workers.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from agents_app.models import Refund
from sessions_app import models as m
from sessions_app import services, wiring
from sessions_app.admin.inbox import AnswerForm, form_kind

pytestmark = pytest.mark.django_db(transaction=True)

INBOX = "admin:sessions_app_approvalrequest_changelist"
PROMPT = "Approve a $10.00 refund on order 42?"


def detail_url(turn_id: str) -> str:
    return reverse("admin:sessions_app_approvalrequest_change", args=(turn_id,))


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def users():
    make = get_user_model().objects.create_user
    operators = Group.objects.create(name="operators")
    olga = make("olga", password="pw-olga-123", is_staff=True)
    olga.groups.add(operators)
    return {
        "alice": make("alice", password="pw-alice-123"),
        "olga": olga,
        "sam": make("sam", password="pw-sam-123", is_staff=True),  # staff, not an operator
    }


@pytest.fixture
def parked(q2_sync, users) -> m.Turn:
    rec = services.turn_start(agent="ops", key="r1", text="refund order 42 10", user=users["alice"])
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    return turn


def client_for(user, **kwargs) -> Client:
    c = Client(**kwargs)
    c.force_login(user)
    return c


def assert_still_parked(turn: m.Turn) -> None:
    turn.refresh_from_db()
    assert turn.status == "suspended" and turn.pending["request"]["id"] == "approve-refund"
    assert not m.Answer.objects.filter(turn=turn).exists()
    assert not m.Step.objects.filter(turn=turn, key__startswith="input:").exists()
    assert not Refund.objects.exists()


def test_an_operator_sees_the_parked_refund_with_its_details(parked, users):
    c = client_for(users["olga"])
    r = c.get(reverse(INBOX))
    assert r.status_code == 200
    assert [t.pk for t in r.context["cl"].result_list] == [parked.pk]
    html = r.content.decode()
    for text in (PROMPT, "ops", "r1", "issue_refund", "&quot;order_id&quot;: &quot;42&quot;", "&quot;amount&quot;: 10"):
        assert text in html, text
    assert "minute" in html  # the waited column (timesince)
    page = c.get(detail_url(parked.pk))
    assert page.status_code == 200
    body = page.content.decode()
    assert PROMPT in body and 'id="june-approve"' in body and 'id="june-deny"' in body
    assert 'name="input_id" value="approve-refund"' in body and "csrfmiddlewaretoken" in body
    assert page.context["waited"] is not None


def test_a_staff_user_who_is_not_an_operator_sees_nothing_and_is_refused(parked, users):
    c = client_for(users["sam"])
    r = c.get(reverse(INBOX))
    assert r.status_code == 200 and list(r.context["cl"].result_list) == []
    assert PROMPT not in r.content.decode()
    assert c.get(detail_url(parked.pk)).status_code == 403
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"})
    assert r.status_code == 403 and PROMPT not in r.content.decode()
    assert_still_parked(parked)
    # the operator can still answer it
    r = client_for(users["olga"]).post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"})
    assert r.status_code == 302
    parked.refresh_from_db()
    assert parked.status == "completed", parked.error


def test_the_inbox_is_for_staff_only(parked, users):
    c = client_for(users["alice"])
    assert c.get(reverse(INBOX)).status_code == 302  # to the admin login
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"})
    assert r.status_code == 302
    assert Client().get(reverse(INBOX)).status_code == 302
    assert_still_parked(parked)


def test_posting_without_a_csrf_token_is_refused(parked, users):
    c = client_for(users["olga"], enforce_csrf_checks=True)
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"})
    assert r.status_code == 403
    assert_still_parked(parked)


def test_a_wrong_input_id_or_an_invalid_answer_leaves_the_turn_parked(parked, users):
    c = client_for(users["olga"])
    r = c.post(detail_url(parked.pk), {"input_id": "approve-something-else", "decision": "approve"})
    assert r.status_code == 409
    assert "the reply no longer waits on" in r.content.decode()  # shown as an admin error message
    assert_still_parked(parked)
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "maybe"})
    assert r.status_code == 422 and 'id="june-approve"' in r.content.decode()  # the form is still there
    assert_still_parked(parked)
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"})
    assert r.status_code == 302
    parked.refresh_from_db()
    assert parked.status == "completed", parked.error


def test_the_schema_is_enforced_server_side_for_a_form_of_fields(parked, users):
    """The form only parses types; the request's JSON schema decides (422, nothing applied)."""
    pending = parked.pending
    pending["request"]["schema"] = {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "note": {"type": "string", "minLength": 3},
            "level": {"enum": ["low", "high"]},
        },
        "required": ["approved", "note"],
    }
    m.Turn.objects.filter(pk=parked.pk).update(pending=pending)
    c = client_for(users["olga"])
    page = c.get(detail_url(parked.pk)).content.decode()
    assert 'name="f_note"' in page and 'name="f_approved"' in page and 'name="f_level"' in page
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "f_approved": "true", "f_note": "no"})
    assert r.status_code == 422 and "too short" in r.content.decode()
    assert_still_parked(parked)
    r = c.post(
        detail_url(parked.pk), {"input_id": "approve-refund", "f_approved": "true", "f_note": "fine", "f_level": "1"}
    )
    assert r.status_code == 302
    answer = m.Answer.objects.get(turn=parked)
    assert answer.answer == {"approved": True, "note": "fine", "level": "high"}
    parked.refresh_from_db()
    # the tool wanted exactly True: a dict is not an approval, so nothing is refunded
    assert parked.status == "completed" and not Refund.objects.exists()


def test_a_raising_authorize_answer_is_a_500_class_error_and_the_same_answer_can_be_retried(parked, users, monkeypatch):
    agent = wiring.agent("ops")
    good = agent.authorize_answer

    def broken(**kwargs):
        raise RuntimeError("directory unreachable")

    monkeypatch.setattr(agent, "authorize_answer", broken)
    c = client_for(users["olga"])
    form = {"input_id": "approve-refund", "decision": "approve"}
    r = c.post(detail_url(parked.pk), form)
    assert r.status_code == 500
    assert "authorize_answer failed" in r.content.decode() and "Traceback" not in r.content.decode()
    assert_still_parked(parked)
    monkeypatch.setattr(agent, "authorize_answer", good)
    assert c.post(detail_url(parked.pk), form).status_code == 302
    parked.refresh_from_db()
    assert parked.status == "completed", parked.error
    assert Refund.objects.count() == 1


def test_an_operator_approves_and_the_answer_is_recorded_and_visible(parked, users):
    c = client_for(users["olga"])
    before = timezone.now()
    r = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"}, follow=True)
    assert r.status_code == 200
    parked.refresh_from_db()
    assert parked.status == "completed", parked.error
    assert parked.session.status == "idle"
    refund = Refund.objects.get()
    assert (refund.order_ref, float(refund.amount)) == ("42", 10.0)
    answer = m.Answer.objects.get(turn=parked)
    assert (answer.user, answer.by, answer.via, answer.remote_addr, answer.answer, answer.input_id) == (
        users["olga"],
        str(users["olga"].pk),
        "admin",
        "127.0.0.1",
        True,
        "approve-refund",
    )
    assert before - dt.timedelta(seconds=1) <= answer.created_at <= timezone.now()
    html = r.content.decode()  # the answer page after the redirect: status and the answer row
    assert "completed" in html and 'id="june-answer-form"' not in html
    assert PROMPT in html and escape(parked.text) in html  # the answered request and the turn's outcome
    assert "olga" in html and "127.0.0.1" in html and "admin" in html and ">true<" in html
    # answered requests leave the inbox; the operator's past answers list it
    assert list(c.get(reverse(INBOX)).context["cl"].result_list) == []
    past = c.get(reverse("admin:sessions_app_approvalrequest_answers"))
    assert past.status_code == 200 and [a.pk for a in past.context["answers"]] == [answer.pk]
    assert (
        list(client_for(users["sam"]).get(reverse("admin:sessions_app_approvalrequest_answers")).context["answers"])
        == []
    )
    # posting again is a conflict, not a second answer
    again = c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"})
    assert again.status_code == 409 and m.Answer.objects.filter(turn=parked).count() == 1
    # the answer is visible on the turn itself (the turns admin), and the live event names olga
    turn_page = c.get(reverse("admin:sessions_app_turn_change", args=[parked.pk])).content.decode()
    assert (
        "answers to its parked requests" in turn_page.lower() and "approve-refund" in turn_page and "olga" in turn_page
    )
    answered = m.Event.objects.get(turn_id=parked.pk, type="input.answered").data
    assert answered["name"] == "olga" and answered["by"] == str(users["olga"].pk)


def test_deny_completes_without_a_refund(parked, users):
    c = client_for(users["olga"])
    assert c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "deny"}).status_code == 302
    parked.refresh_from_db()
    assert parked.status == "completed" and not Refund.objects.exists()
    assert m.Answer.objects.get(turn=parked).answer is False


def test_a_parked_turn_of_an_archived_generation_is_not_listed(parked, users):
    services.session_reset(agent="ops", key="r1", user=users["alice"])
    c = client_for(users["olga"])
    assert list(c.get(reverse(INBOX)).context["cl"].result_list) == []


def test_the_form_follows_the_schema():
    assert form_kind({"type": "boolean"}) == "boolean"
    assert form_kind({"type": "string"}) == form_kind({"enum": [1, "a"]}) == form_kind({"type": "integer"}) == "scalar"
    assert form_kind({"type": "object", "properties": {"a": {"type": "number"}}}) == "object"
    for other in (
        None,
        {"type": "array"},
        {"type": "object"},
        {"type": "object", "properties": {"a": {"type": "object"}}},
    ):
        assert form_kind(other) == "json"

    def answer(schema, data):
        form = AnswerForm({"input_id": "x", **data}, request_spec={"id": "x", "schema": schema})
        assert form.is_valid(), form.errors
        return form.answer()

    assert answer({"type": "integer"}, {"answer": "7"}) == 7
    assert answer({"enum": ["a", 2, None]}, {"answer": "1"}) == 2
    assert answer({"type": "array"}, {"answer_json": '[1, {"b": null}]'}) == [1, {"b": None}]
    bad_json = AnswerForm(
        {"input_id": "x", "answer_json": "[1,"}, request_spec={"id": "x", "schema": {"type": "array"}}
    )
    assert not bad_json.is_valid() and "answer" in bad_json.errors_text()
    not_int = AnswerForm({"input_id": "x", "answer": "seven"}, request_spec={"id": "x", "schema": {"type": "integer"}})
    assert not not_int.is_valid()


def test_a_superuser_without_the_grant_sees_the_request_read_only_and_cannot_answer(parked, users):
    """Superuser status is not a policy grant: authorize_answer alone decides."""
    root = get_user_model().objects.create_superuser("root", password="pw-root-123")
    c = client_for(root)
    assert list(c.get(reverse(INBOX)).context["cl"].result_list) == []
    page = c.get(detail_url(parked.pk))
    assert page.status_code == 200 and page.context["form"] is None
    assert 'id="june-read-only"' in page.content.decode() and 'id="june-approve"' not in page.content.decode()
    assert c.post(detail_url(parked.pk), {"input_id": "approve-refund", "decision": "approve"}).status_code == 403
    assert_still_parked(parked)


def test_the_inbox_links_the_operator_dashboard_in_any_admin_site(users):
    """In a host project (docs/install.md) the dashboard was linked from nowhere: the repository's
    admin index links it (its own templates/admin/index.html), a host's index has no such link,
    and the inbox had none either — an operator had to know the URL."""
    r = client_for(users["olga"]).get(reverse(INBOX))
    assert f'href="{reverse("admin:sessions_app_approvalrequest_dashboard")}"' in r.content.decode()
