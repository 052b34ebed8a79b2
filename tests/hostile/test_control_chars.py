"""Control characters where identifiers and form text enter (issue 35 items 1, 2, 6, 7).

Pins: ``SESSION_KEY_RE`` & co. were ``^…$`` used with ``match``, and Python's ``$`` also
matches before a final newline: ``POST …/sessions/b1%0A/turns?wait=false`` created a session
``"b1\\n"`` and a turn, then answered 500 (the ``Location`` header cannot hold the newline)
for a turn that ran; the websocket to ``…/sessions/b1%0A/`` answered ``ready``; a signed
webhook with session ``"whnl\\n"`` or user ``"bot\\n"`` got 202. NUL in the chat's rename form
was a PostgreSQL ``DataError`` (500). A 403 logged a whole traceback; opening a session URL
created the session.

Then, generated: newline, carriage return, tab, NUL and U+2028 placed in every path parameter
of every endpoint, in every HTML form's fields and in every websocket frame's fields. Each
answer is < 500, and a refused request leaves no session, turn, message or event behind."""

from __future__ import annotations

import json
import logging
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from sessions_app import models as m
from sessions_app import services
from sessions_app.proactive.channels import sign
from sessions_app.workers import tasks

from .support import BASE, Api, check_answer, hostile, make_user, path_segment, token_for
from .test_regressions import cookie_for, open_socket, until_ready

pytestmark = pytest.mark.django_db(transaction=True)

CONTROL = ["\n", "\r", "\t", "\x00", "\u2028", "\r\n"]
SECRET = "control-webhook-secret"


def rows() -> tuple[int, int, int, int]:
    return (m.Session.objects.count(), m.Turn.objects.count(), m.Message.objects.count(), m.Event.objects.count())


@pytest.fixture
def alice():
    return make_user("alice")


@pytest.fixture
def api(alice):
    return Api(token_for(alice))


# -- regressions, each named for what it pins ----------------------------------------------------------


def test_a_session_key_ending_in_a_newline_is_refused_and_creates_nothing(api):
    before = rows()
    status, body, response = api.send("post", f"{BASE}/b1%0A/turns?wait=false", json.dumps({"text": "hi"}).encode())
    assert status == 400 and body["error"]["code"] == "bad_request", body
    assert rows() == before and not m.Session.objects.filter(key__startswith="b1").exists()


def test_a_cancel_on_a_newline_key_or_turn_id_is_a_4xx(api, alice):
    turn = services.turn_start(agent="ops", key="b1", text="hello", user=alice, source="http")
    for path in (f"{BASE}/b1%0A/turns/{turn.turn_id}/cancel", f"{BASE}/b1/turns/{turn.turn_id}%0A/cancel"):
        status, body, _ = api.send("post", path)
        assert status in (400, 404), (path, status, body)
    assert m.Turn.objects.get(pk=turn.turn_id).cancel_reason is None


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_a_websocket_to_a_newline_key_is_refused():
    alice = await sync_to_async(make_user)("alice")
    comm, connected = await open_socket("/ws/agents/ops/sessions/b1%0A/", await cookie_for(alice))
    assert connected
    frame = await comm.receive_json_from(timeout=30)
    assert frame["type"] == "error" and frame["code"] == "refused" and frame["status"] == 400, frame
    assert (await comm.receive_output(timeout=30))["code"] == 4400
    assert not await sync_to_async(m.Session.objects.exists)()


@pytest.mark.parametrize(
    "field,value",
    [("session", "whnl\n"), ("user", "bot\n"), ("session", "a\rb"), ("user", "bot\x00"), ("session", "s\u2028")],
)
def test_a_signed_webhook_with_a_control_char_in_session_or_user_is_refused(monkeypatch, field, value, settings):
    settings.JUNE_WEBHOOK_SECRETS = {"OPS": SECRET}
    settings.JUNE_WEBHOOK_URLS = {}
    payload = {"session": "hook-1", "text": "hello", "user": "bot", field: value}
    body = json.dumps(payload).encode()
    ts = str(int(time.time()))
    response = Client(raise_request_exception=False).post(
        "/api/agents/ops/webhook",
        data=body,
        content_type="application/json",
        HTTP_X_JUNE_TIMESTAMP=ts,
        HTTP_X_JUNE_SIGNATURE=sign(SECRET.encode(), ts, body),
    )
    assert response.status_code == 400, response.content
    assert rows() == (0, 0, 0, 0)


@pytest.mark.parametrize("title", ["a\x00b", "\x00"])
def test_nul_in_a_session_title_is_a_400_not_a_500(alice, title):
    services.turn_start(agent="ops", key="t1", text="hello", user=alice, source="http")
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.post("/agents/ops/sessions/t1/title", {"title": title})
    assert response.status_code == 400, response.status_code
    assert m.Session.objects.get(key="t1").title == ""


def test_nul_in_admin_forms_and_searches_is_a_400(alice):
    olga = make_user("olga", operator=True)
    olga.is_staff = olga.is_superuser = True
    olga.save()
    parked = services.turn_start(agent="ops", key="p1", text="refund order 42 10", user=alice, source="http")
    tasks.run_turn(parked.turn_id)
    client = Client(raise_request_exception=False)
    client.force_login(olga)
    for url in ("/admin/sessions_app/session/?q=a%00b", "/admin/sessions_app/turn/?q=%00", "/admin/auth/user/?q=x%00"):
        assert client.get(url).status_code == 400, url
    answer = client.post(
        f"/admin/sessions_app/approvalrequest/{parked.turn_id}/change/",
        {"input_id": "approve-refund", "decision": "approve", "note": "ok\x00"},
    )
    assert answer.status_code == 400
    assert m.Turn.objects.get(pk=parked.turn_id).status == "suspended"
    user_form = client.post(f"/admin/auth/user/{alice.pk}/change/", {"username": "al\x00ice"})
    assert user_form.status_code == 400 and type(alice).objects.filter(username="alice").exists()


def test_a_403_is_logged_on_one_line_without_a_traceback(alice, caplog):
    bob = make_user("bob")
    services.turn_start(agent="ops", key="mine", text="hello", user=alice, source="http")
    client = Client(raise_request_exception=False)
    client.force_login(bob)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.get("/agents/ops/sessions/mine/").status_code == 403
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert "Forbidden" in record.getMessage() and record.exc_info is None
    assert "Traceback" not in caplog.text


def test_a_500_keeps_its_traceback(caplog):
    from sessions_app.logfilters import RefusalsOnOneLine

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        record = logging.LogRecord(
            "django.request", logging.ERROR, __file__, 1, "Internal Server Error", (), sys.exc_info()
        )
    record.status_code = 500
    assert RefusalsOnOneLine().filter(record) and record.exc_info is not None


# -- generated: control characters in every path parameter, form field and frame field -------------------


def with_control(plain: str):
    """``plain`` with a control character (or two) at the start, inside or at the end."""
    return st.tuples(st.sampled_from(CONTROL), st.sampled_from(["start", "middle", "end"])).map(
        lambda cp: {"start": cp[0] + plain, "middle": plain[:1] + cp[0] + plain[1:], "end": plain + cp[0]}[cp[1]]
    )


ENDPOINTS = [  # (method, path template, body): {agent}, {key}, {turn} are filled in
    ("post", "/api/agents/{agent}/sessions/{key}/turns?wait=false", {"text": "hello"}),
    ("get", "/api/agents/{agent}/sessions/{key}/turns", None),
    ("get", "/api/agents/{agent}/sessions/{key}/turns/{turn}", None),
    ("post", "/api/agents/{agent}/sessions/{key}/turns/{turn}/cancel", None),
    ("post", "/api/agents/{agent}/sessions/{key}/turns/{turn}/resume", {"input_id": "approve-refund", "answer": True}),
    ("post", "/api/agents/{agent}/sessions/{key}/reset", None),
    ("get", "/api/agents/{agent}/sessions/{key}/pending", None),
    ("get", "/api/agents/{agent}/sessions/{key}/events?after=0", None),
    ("get", "/api/agents/{agent}/sessions/", None),
    ("post", "/api/approvals/{turn}/answer", {"input_id": "approve-refund", "answer": True}),
]


@hostile(60)
@given(endpoint=st.sampled_from(ENDPOINTS), data=st.data())
def test_control_chars_in_path_parameters(api, alice, endpoint, data):
    method, template, body = endpoint
    which = data.draw(st.sampled_from([n for n in ("agent", "key", "turn") if "{%s}" % n in template]))
    turn = (
        m.Turn.objects.filter(session__key="c1").values_list("pk", flat=True).first()
        or services.turn_start(agent="ops", key="c1", text="hello", user=alice, source="http").turn_id
    )
    params = {"agent": "ops", "key": "c1", "turn": turn}
    params[which] = data.draw(with_control(params[which]))
    path = template.format(**{k: path_segment(v) for k, v in params.items()})
    before = rows()
    raw = json.dumps(body).encode() if body is not None else None
    status, answer, response = api.send(method, path, raw)
    check_answer(f"{method.upper()} {template} ({which})", status, answer, response, ok=(200, 201, 202, 204))
    assert status >= 400, (path, status, answer)  # an identifier with a control character names nothing
    assert rows() == before, (path, status)
    assert "\n" not in "".join(str(v) for v in response.headers.values())


FORMS = [  # (path template, fields): the site's HTML forms, {key} filled in
    ("/accounts/login/", {"username": "alice", "password": "pw-alice-123"}),
    ("/agents/{agent}/sessions/{key}/title", {"title": "My title"}),
    ("/agents/{agent}/sessions/new", {}),
]


@hostile(40)
@given(form=st.sampled_from(FORMS), data=st.data())
def test_control_chars_in_form_fields_and_paths(alice, form, data):
    template, fields = form
    services.turn_start(agent="ops", key="f1", text="hello", user=alice, source="http") if not m.Session.objects.filter(
        key="f1"
    ).exists() else None
    params = {"agent": "ops", "key": "f1"}
    target = data.draw(st.sampled_from(sorted(fields) + [n for n in ("agent", "key") if "{%s}" % n in template]))
    fields = dict(fields)
    if target in fields:
        fields[target] = data.draw(with_control(fields[target]))
    else:
        params[target] = data.draw(with_control(params[target]))
    path = template.format(**{k: path_segment(v) for k, v in params.items()})
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    before = rows()
    response = client.post(path, fields)
    assert response.status_code < 500, (path, fields, response.status_code)
    if response.status_code >= 400 or target in ("agent", "key"):
        assert rows()[:2] == before[:2], (path, fields, response.status_code)
    title = m.Session.objects.get(key="f1").title
    assert "\x00" not in title and "\n" not in title


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
@pytest.mark.parametrize("char", CONTROL)
async def test_control_chars_in_websocket_frame_fields(char):
    alice = await sync_to_async(make_user)("alice")
    comm, connected = await open_socket("/ws/agents/ops/sessions/w1/", await cookie_for(alice))
    assert connected
    await until_ready(comm)
    frames = [
        {"type": "start" + char, "text": "hi"},
        {"type": "cancel", "turn_id": "t" + char},
        {"type": "resume", "turn_id": "a" * 32 + char, "input_id": "approve-refund", "answer": True},
        {"type": "resume", "turn_id": "a" * 32, "input_id": "approve" + char, "answer": True},
    ]
    for frame in frames:
        before = await sync_to_async(rows)()
        await comm.send_to(text_data=json.dumps(frame))
        reply = await comm.receive_json_from(timeout=30)
        assert reply["type"] == "error" and 400 <= reply.get("status", 400) < 500, (frame, reply)
        assert await sync_to_async(rows)() == before, frame
    # text may hold a newline or a tab (a message), never NUL
    before = await sync_to_async(rows)()
    await comm.send_to(text_data=json.dumps({"type": "start", "text": "line" + char + "line"}))
    reply = await comm.receive_json_from(timeout=30)
    if char == "\x00":
        assert reply["type"] == "error" and await sync_to_async(rows)() == before, reply
    else:
        assert reply["type"] != "error", reply
    await comm.disconnect()
