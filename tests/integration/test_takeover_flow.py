"""Takeover: an operator the agent allows takes a session over, the user's messages reach them
live over the websocket and start no turn, the operator writes over the same socket, the user's
chat gets it as a person's message, a second operator is refused (409), a non-operator too
(403); hand back resumes the agent, whose next request holds the operator's messages marked as
a person's. All of it in the database: a fresh process (a restart) sees the same takeover."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from agents_app import providers
from agents_app.runtime.errors import SessionTakenOverError, TurnConflictError
from agents_app.runtime.fakes import ScriptedModel
from agents_app.runtime.messages import Role
from agents_app.runtime.model import ModelReply
from sessions_app import models as m
from sessions_app import services, takeover
from sessions_app.site_errors import AccessDenied

from .test_consumers import communicator, cookie_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def people(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)
    make = get_user_model().objects.create_user
    operators = Group.objects.create(name="operators")
    olga = make("olga", password="pw-olga-123", is_staff=True, first_name="Olga", last_name="Ops")
    oscar = make("oscar", password="pw-oscar-123", is_staff=True)
    for op in (olga, oscar):
        op.groups.add(operators)
    return {
        "alice": make("alice", password="pw-alice-123"),
        "olga": olga,
        "oscar": oscar,
        "sam": make("sam", password="pw-sam-123", is_staff=True),  # staff, not an operator
    }


def test_takeover_hand_back_and_what_the_model_reads_after(people):
    alice, olga = people["alice"], people["olga"]
    seen: list = []

    def reply(request):
        seen.append(request.messages)
        return ModelReply(text="the agent again")

    providers.register("demo", lambda agent: ScriptedModel(reply))
    try:
        services.turn_start(agent="ops", key="s1", text="hello agent", user=alice)
        session = m.Session.objects.get(key="s1")
        row = takeover.takeover_begin(session=session, user=olga, running="cancel")
        assert row.operator_name == "Olga Ops"
        # no turn starts while taken over: the rule, as every transport meets it
        with pytest.raises(SessionTakenOverError):
            services.turn_start(agent="ops", key="s1", text="anyone?", user=alice)
        assert takeover.user_says(session=session, user=alice, text="I want a human") is not None
        takeover.person_says(session=session, user=olga, text="Hi, Olga here. Your refund is on its way.")
        assert m.Turn.objects.filter(session=session).count() == 1
        # a second operator: 409; a staff user the agent does not allow: 403
        with pytest.raises(TurnConflictError) as second:
            takeover.takeover_begin(session=session, user=people["oscar"])
        assert second.value.http_status == 409 and "Olga Ops" in str(second.value)
        with pytest.raises(AccessDenied):
            takeover.takeover_begin(session=session, user=people["sam"])
        with pytest.raises(AccessDenied):
            takeover.person_says(session=session, user=people["oscar"], text="not mine")
        takeover.takeover_end(session=session, user=olga)
        calls = len(seen)
        services.turn_start(agent="ops", key="s1", text="thanks, and one more question", user=alice)
    finally:
        providers.unregister("demo")
    assert len(seen) == calls + 1
    transcript = seen[-1]
    person = [x for x in transcript if x.role == Role.ASSISTANT and x.by == "person:Olga Ops"]
    assert [x.text for x in person] == ["Hi, Olga here. Your refund is on its way."]
    notes = [x.text for x in transcript if x.role == Role.TRIGGER and x.by == "takeover"]
    assert len(notes) == 2 and "Olga Ops" in notes[0] and "handed the conversation back" in notes[1]
    assert any(x.role == Role.USER and x.text == "I want a human" for x in transcript)
    # the audit log has the takeover and the hand back
    actions = list(m.AuditEvent.objects.filter(session_id=session.pk).values_list("action", flat=True))
    assert m.AuditAction.TAKEOVER in actions and m.AuditAction.HAND_BACK in actions


def test_the_admin_page_takes_over_and_hands_back_and_a_second_operator_gets_409(people):
    alice = people["alice"]
    services.turn_start(agent="ops", key="s2", text="hello", user=alice)
    session = m.Session.objects.get(key="s2")
    page = reverse("admin:sessions_app_session_change", args=[session.pk])
    olga, oscar, sam = Client(), Client(), Client()
    olga.force_login(people["olga"])
    oscar.force_login(people["oscar"])
    sam.force_login(people["sam"])
    first = olga.get(page).content.decode()
    assert 'id="june-take-over"' in first
    # its form is not nested in the admin's change form (a browser posted that one instead)
    change_form = first[first.index('id="session_form"') :]
    assert "june-take-over" not in change_form[: change_form.index("</form>")]
    assert 'id="june-take-over"' not in sam.get(page).content.decode()
    begin = reverse("admin:sessions_app_session_takeover", args=[session.pk])
    assert sam.post(begin, {"running": "finish"}).status_code == 403
    assert olga.post(begin, {"running": "finish"}).status_code == 302
    assert oscar.post(begin, {"running": "cancel"}).status_code == 409
    shown = olga.get(page).content.decode()
    assert 'id="june-takeover-live"' in shown and "Olga Ops" in shown
    say = reverse("admin:sessions_app_session_takeover_say", args=[session.pk])
    assert oscar.post(say, {"text": "hi"}).status_code == 403
    assert olga.post(say, {"text": "hello from Olga"}).status_code == 302
    dashboard = olga.get(reverse("admin:sessions_app_approvalrequest_dashboard")).content.decode()
    assert "june-taken-over" in dashboard and "s2" in dashboard
    assert olga.post(reverse("admin:sessions_app_session_takeover_end", args=[session.pk])).status_code == 302
    assert takeover.open_takeover(session) is None
    (row,) = m.Takeover.objects.all()
    assert row.messages == 1 and row.ended_at is not None and row.running == "finish"


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_the_user_and_the_operator_talk_live_over_the_websocket(people):
    alice, olga = people["alice"], people["olga"]
    await sync_to_async(services.turn_start)(agent="ops", key="s3", text="hello", user=alice)
    session = await sync_to_async(m.Session.objects.get)(key="s3")
    await sync_to_async(takeover.takeover_begin)(session=session, user=olga, running="cancel")
    user = communicator("/ws/agents/ops/sessions/s3/", await cookie_for(alice))
    operator = communicator("/ws/agents/ops/sessions/s3/", await cookie_for(olga))
    stranger = communicator("/ws/agents/ops/sessions/s3/", await cookie_for(people["oscar"]))
    for comm in (user, operator, stranger):
        assert (await comm.connect())[0]

    async def until(comm, want):
        while True:
            frame = await comm.receive_json_from(timeout=10)
            if want(frame):
                return frame

    assert (await until(stranger, lambda f: f["type"] == "error"))["status"] == 403
    started = await until(user, lambda f: f["type"] == "takeover.started")
    assert started["by"] == "Olga Ops"
    await until(user, lambda f: f["type"] == "ready")
    await until(operator, lambda f: f["type"] == "ready")
    await user.send_json_to({"type": "start", "text": "are you a person?", "id": 1})
    ack = await until(user, lambda f: f["type"] in ("ack", "error") and f.get("id") == 1)
    assert ack["type"] == "ack" and ack["status"] == "taken_over" and ack["turn_id"] is None
    heard = await until(operator, lambda f: f["type"] == "person.message")
    assert (heard["role"], heard["text"], heard["by"]) == ("user", "are you a person?", "alice")
    await operator.send_json_to({"type": "say", "text": "Yes, I am Olga.", "id": 7})
    said = await until(user, lambda f: f["type"] == "person.message" and f["role"] == "person")
    assert (said["text"], said["by"]) == ("Yes, I am Olga.", "Olga Ops")
    await user.send_json_to({"type": "say", "text": "I am the operator now", "id": 2})
    refused = await until(user, lambda f: f["type"] == "error" and f.get("id") == 2)
    assert refused["status"] == 403
    assert await sync_to_async(m.Turn.objects.count)() == 1
    for comm in (user, operator, stranger):
        await comm.disconnect()


def test_the_api_refuses_a_turn_while_taken_over_with_409(people):
    from .test_api import Api, token_for

    alice, olga = people["alice"], people["olga"]
    services.turn_start(agent="ops", key="s4", text="hello", user=alice)
    takeover.takeover_begin(session=m.Session.objects.get(key="s4"), user=olga)
    status, body, _ = Api(token_for(alice)).post("/api/agents/ops/sessions/s4/turns?wait=false", {"text": "hi"})
    assert status == 409 and body["error"]["code"] == "taken_over", body
    assert m.Turn.objects.filter(session__key="s4").count() == 1


def test_hand_back_answers_409_while_the_reply_let_finish_still_runs(people):
    """Olga takes over while the agent's reply runs and lets it finish: until it has ended, her
    hand back is refused (409, in the service and on the admin page) and changes nothing; then
    it goes through, and the transcript has the reply before her message."""
    from threading import Thread

    alice, olga = people["alice"], people["olga"]
    client = Client()
    client.force_login(olga)
    tried: dict = {}

    def meanwhile():  # another process's request, while the worker is inside the model call
        session = m.Session.objects.get(key="s5")
        tried["status"] = m.Turn.objects.get(session=session).status
        takeover.takeover_begin(session=session, user=olga, running="finish")
        takeover.person_says(session=session, user=olga, text="Olga here, one moment")
        try:
            takeover.takeover_end(session=session, user=olga)
        except TurnConflictError as exc:
            tried["service"] = exc.http_status
        page = client.post(reverse("admin:sessions_app_session_takeover_end", args=[session.pk]))
        tried["admin"] = (page.status_code, "still running" in page.content.decode())
        tried["open"] = takeover.open_takeover(session) is not None

    def reply(request):
        worker = Thread(target=meanwhile)
        worker.start()
        worker.join(30)
        return ModelReply(text="the agent's reply, let finish")

    providers.register("demo", lambda agent: ScriptedModel(reply))
    try:
        rec = services.turn_start(agent="ops", key="s5", text="hello agent", user=alice)
    finally:
        providers.unregister("demo")
    assert tried == {"status": "running", "service": 409, "admin": (409, True), "open": True}, tried
    assert m.Turn.objects.get(pk=rec.turn_id).status == "completed"
    session = m.Session.objects.get(key="s5")
    takeover.takeover_end(session=session, user=olga)
    texts = [
        (row["role"], row["data"].get("text"))
        for row in m.Message.objects.filter(session=session).order_by("index").values("role", "data")
    ]
    reply_at = texts.index(("assistant", "the agent's reply, let finish"))
    assert texts.index(("assistant", "Olga here, one moment")) > reply_at, texts


def test_no_path_starts_a_turn_while_taken_over_and_the_check_has_no_query_of_its_own(people):
    """A start, an edit (fork) and a Regenerate are refused while Olga has the session (the
    store's ``check_start``, under the session's lock); the takeover fact is read in a statement
    the start makes anyway (with the turn's id and the park), not in one of its own."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    alice, olga = people["alice"], people["olga"]
    first = services.turn_start(agent="ops", key="s6", text="hello", user=alice)
    with CaptureQueriesContext(connection) as free:
        services.turn_start(agent="ops", key="s6", text="and again", user=alice)
    reads = [q["sql"] for q in free.captured_queries if "sessions_app_takeover" in q["sql"]]
    assert all("sessions_app_turn" in sql for sql in reads), reads
    session = m.Session.objects.get(key="s6")
    takeover.takeover_begin(session=session, user=olga)
    opened = m.Message.objects.filter(session=session, turn_id=first.turn_id, role="user").first()
    last = m.Turn.objects.filter(session=session).order_by("-order").first()
    for attempt in (
        lambda: services.turn_start(agent="ops", key="s6", text="anyone?", user=alice),
        lambda: services.branch_fork(agent="ops", key="s6", at=opened.index, text="edited", user=alice),
        lambda: services.turn_regenerate(agent="ops", key="s6", turn_id=last.pk, user=alice),
    ):
        with pytest.raises(SessionTakenOverError):
            attempt()
    assert m.Turn.objects.filter(session=session).count() == 2
    assert m.Session.objects.get(pk=session.pk).generation == session.generation


def test_the_inbox_takes_a_parked_conversation_over_with_one_button(people, monkeypatch):
    """An operator reading a parked request in the inbox (its row, or its answer page) takes its
    conversation over with a POST from there and lands on the session's live panel; a staff user
    the agent does not allow sees no button; once taken, the row says by whom."""
    rec = services.turn_start(agent="ops", key="s7", text="refund order 42 10", user=people["alice"])
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    olga, sam = Client(), Client()
    olga.force_login(people["olga"])
    sam.force_login(people["sam"])
    inbox = reverse("admin:sessions_app_approvalrequest_changelist")
    answer_page = reverse("admin:sessions_app_approvalrequest_change", args=[turn.pk])
    begin = reverse("admin:sessions_app_session_takeover", args=[turn.session_id])
    listed = olga.get(inbox).content.decode()
    assert f'form="june-takeover-{turn.pk}"' in listed and f'action="{begin}"' in listed
    assert 'id="june-inbox-takeover"' in olga.get(answer_page).content.decode()
    # sam may answer (an operator), and this agent's authorize_takeover says no to him
    people["sam"].groups.add(Group.objects.get(name="operators"))
    allows = takeover.may_take_over
    monkeypatch.setattr(
        takeover,
        "may_take_over",
        lambda *, session, user: user.username != "sam" and allows(session=session, user=user),
    )
    assert "june-inbox-take-over" not in sam.get(inbox).content.decode()
    assert 'id="june-inbox-takeover"' not in sam.get(answer_page).content.decode()

    taken = olga.post(begin, {"running": "cancel"})
    assert taken.status_code == 302 and taken["Location"].endswith(
        reverse("admin:sessions_app_session_change", args=[turn.session_id]) + "#june-takeover"
    )
    assert takeover.open_takeover(turn.session).operator_name == "Olga Ops"
    assert "taken over by Olga Ops" in olga.get(inbox).content.decode()
    assert "taken over by Olga Ops" in olga.get(answer_page).content.decode()
    assert m.Turn.objects.get(pk=turn.pk).status == "suspended"  # the request still waits for its answer


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_files_the_user_sends_while_taken_over_reach_the_operator_and_the_transcript(people):
    """Files were refused while a person answered (409 "send the files again once they hand
    back"; the chat's Attach button off): a user showing the operator a screenshot of the problem
    could not. Now a message's files go with it as its text does: to the operator live (with its
    link to the file), and into the transcript at the hand back, where the model reads them."""
    from agents_app.models import Attachment
    from tests.attachment_files import png
    from tests.integration.test_api import Api, token_for
    from tests.integration.test_attachments import upload

    alice, olga = people["alice"], people["olga"]
    await sync_to_async(services.turn_start)(agent="ops", key="s9", text="hello", user=alice)
    session = await sync_to_async(m.Session.objects.get)(key="s9")
    await sync_to_async(takeover.takeover_begin)(session=session, user=olga, running="cancel")
    api = Api(await sync_to_async(token_for)(alice))
    status, shot = await sync_to_async(upload)(api, "broken.png", png(), session="s9")
    assert status == 201, shot
    user = communicator("/ws/agents/ops/sessions/s9/", await cookie_for(alice))
    operator = communicator("/ws/agents/ops/sessions/s9/", await cookie_for(olga))
    for comm in (user, operator):
        assert (await comm.connect())[0]

    async def until(comm, want):
        while True:
            frame = await comm.receive_json_from(timeout=10)
            if want(frame):
                return frame

    await until(user, lambda f: f["type"] == "ready")
    await until(operator, lambda f: f["type"] == "ready")
    await user.send_json_to({"type": "start", "text": "", "attachments": [shot["id"]], "id": 1})
    ack = await until(user, lambda f: f["type"] in ("ack", "error") and f.get("id") == 1)
    assert ack["type"] == "ack" and ack["status"] == "taken_over", ack
    heard = await until(operator, lambda f: f["type"] == "person.message")
    assert heard["role"] == "user" and [a["id"] for a in heard["attachments"]] == [shot["id"]]
    assert heard["attachments"][0]["name"] == "broken.png"
    # sent: not the user's to send again, nor swept as an unsent upload
    row = await sync_to_async(Attachment.objects.get)(pk=shot["id"])
    assert row.turn_id == m.takeover_files_mark((await sync_to_async(takeover.open_takeover)(session)).pk)
    await user.send_json_to({"type": "start", "text": "again", "attachments": [shot["id"]], "id": 2})
    again = await until(user, lambda f: f["type"] in ("ack", "error") and f.get("id") == 2)
    assert again["type"] == "error" and again["status"] == 409
    for comm in (user, operator):
        await comm.disconnect()

    seen: list = []

    def reply(request):
        seen.append(request.messages)
        return ModelReply(text="I see it")

    providers.register("demo", lambda agent: ScriptedModel(reply))
    try:
        await sync_to_async(takeover.takeover_end)(session=session, user=olga)
        # (its own thread: the inline worker runs the turn with async_to_sync of its own)
        await sync_to_async(services.turn_start, thread_sensitive=False)(
            agent="ops", key="s9", text="did you see it?", user=alice
        )
    finally:
        providers.unregister("demo")
    [shown] = [x for x in seen[-1] if x.role == Role.USER and x.attachments]
    assert [a["id"] for a in shown.attachments] == [shot["id"]]
    # the operator's panel links each file under the session's (staff-checked) download path
    page = Client()
    await sync_to_async(page.force_login)(olga)
    await sync_to_async(takeover.takeover_begin)(session=session, user=olga)
    shown = await sync_to_async(page.get)(reverse("admin:sessions_app_session_change", args=[session.pk]))
    assert 'data-attachments="/api/agents/ops/sessions/s9/attachments"' in shown.content.decode()


def test_the_users_archive_words_the_takeover_as_the_chat_does(people):
    """The user's archive showed the notes written for the model, with their role:
    "trigger: [A person, Olga Ops, took over this conversation from you. Until they handed it
    back, the assistant replies were theirs, not yours.]". It shows the chat's words."""
    alice, olga = people["alice"], people["olga"]
    services.turn_start(agent="ops", key="s10", text="hello", user=alice)
    session = m.Session.objects.get(key="s10")
    takeover.takeover_begin(session=session, user=olga, running="cancel")
    takeover.user_says(session=session, user=alice, text="is anyone there?")
    takeover.person_says(session=session, user=olga, text="Olga here.")
    takeover.takeover_end(session=session, user=olga)
    services.session_reset(agent="ops", key="s10", user=alice)  # the generation, archived
    web = Client()
    web.force_login(alice)
    page = web.get(f"/agents/ops/sessions/s10/archive/{session.generation}/").content.decode()
    assert '<div class="note takeover">Olga Ops (a person) has joined the conversation.</div>' in page
    assert '<div class="note takeover">Olga Ops handed the conversation back to the assistant.</div>' in page
    assert "trigger:" not in page and "from you" not in page
    assert "is anyone there?" in page and 'data-by="Olga Ops"' in page
    # and its export: the note in the same words, the person's reply under their name
    md = web.get(f"/agents/ops/sessions/s10/archive/{session.generation}/export.md").content.decode()
    assert "## Takeover · " in md and "Olga Ops (a person) has joined the conversation." in md
    assert "## Olga Ops (a person) · " in md and "from you" not in md


def test_the_staff_archive_shows_a_takeover_as_people_read_it(people):
    """The staff archive's transcript showed a takeover's notes as the model reads them ("[A
    person, Olga Ops, took over this conversation from you. Until they handed it back…]",
    "trigger by takeover") and the operator's messages "by person:Olga Ops". It shows the notes in
    the chat's words, marked as takeover notes (the model's wording kept behind a disclosure),
    and the operator's messages as theirs."""
    alice, olga = people["alice"], people["olga"]
    services.turn_start(agent="ops", key="s9", text="hello agent", user=alice)
    session = m.Session.objects.get(key="s9")
    takeover.takeover_begin(session=session, user=olga, running="cancel")
    takeover.person_says(session=session, user=olga, text="Hi, Olga here.")
    takeover.takeover_end(session=session, user=olga)
    staff = Client()
    staff.force_login(olga)
    url = reverse("admin:sessions_app_session_generation", args=(session.pk, session.generation))
    html = staff.get(url).content.decode()
    transcript = html[html.index('id="transcript"') :]
    notes = re.findall(r'<div class="june-msg takeover"[^>]*>(.*?)</div>\s*</div>', transcript, re.S)
    assert len(notes) == 2, transcript[:3000]
    assert "takeover note" in notes[0] and "Olga Ops (a person) has joined the conversation." in notes[0]
    assert "Olga Ops handed the conversation back to the assistant." in notes[1]
    shown = re.sub(r"<details.*?</details>", "", transcript, flags=re.S)
    assert "took over this conversation from you" not in shown and "by takeover" not in shown
    assert "person:Olga Ops" not in transcript and "Olga Ops (a person, in a takeover)" in transcript
