"""Regression tests of issue 13 (hostile input), one per failure found by the attack; each
docstring names the failure it pins. HTTP through Django's test client, websockets through
the full ASGI stack (june_project.asgi), the webhook with valid signatures."""

from __future__ import annotations

import json
import os
import time
from urllib.parse import quote

import jsonschema
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from sessions_app import models as m
from sessions_app import selectors, services
from sessions_app.proactive.channels import sign
from sessions_app.safejson import BAD_STRING, MAX_DEPTH, TOO_DEEP
from sessions_app.web import origin as ws_origin
from tests.settle import settle_tasks

from .support import BASE, Api, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hostile-webhook-secret"
HOOK = "/api/agents/ops/webhook"
DEEP = "[" * 50_000 + "]" * 50_000


@pytest.fixture(autouse=True)
def webhook_secret(monkeypatch, settings):
    settings.JUNE_WEBHOOK_SECRETS = {"OPS": SECRET}
    settings.JUNE_WEBHOOK_URLS = {}


@pytest.fixture
def alice():
    return make_user("alice")


@pytest.fixture
def api(alice):
    return Api(token_for(alice))


def signed_post(raw: bytes):
    ts = str(int(time.time()))
    return Client().post(
        HOOK,
        data=raw,
        content_type="application/json",
        HTTP_X_JUNE_TIMESTAMP=ts,
        HTTP_X_JUNE_SIGNATURE=sign(SECRET.encode(), ts, raw),
    )


def assert_bad_request(status, body, *, message: str | None = None):
    assert status == 400 and body["error"]["code"] == "bad_request", body
    if message is not None:
        assert message in body["error"]["message"], body


def parked_turn(user) -> m.Turn:
    """A turn parked on the demo agent's refund approval (run inline, as a worker would)."""
    from sessions_app.workers import tasks

    rec = services.turn_start(agent="ops", key="parked", text="refund order 42 10", user=user, source="http")
    tasks.run_turn(rec.turn_id)
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    return turn


# -- websocket helpers ----------------------------------------------------------------------------------


def application():
    from june_project.asgi import application

    return application


@sync_to_async
def cookie_for(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def open_socket(path: str, cookie: bytes, *, origin: bytes = b"http://testserver", host: bytes | None = None):
    headers = [(b"origin", origin), (b"cookie", cookie)] + ([(b"host", host)] if host else [])
    comm = WebsocketCommunicator(application(), path, headers=headers)
    connected, _ = await comm.connect(timeout=30)
    return comm, connected


async def until_ready(comm) -> None:
    while (await comm.receive_json_from(timeout=30))["type"] != "ready":
        pass


async def frame_reply(comm, raw: str) -> dict:
    await comm.send_to(text_data=raw)
    return await comm.receive_json_from(timeout=30)


# -- 3. deeply nested JSON ---------------------------------------------------------------------------------


def test_deeply_nested_json_is_a_400_on_every_http_body(api, alice):
    """Issue 13.3: 50,000-deep JSON raised RecursionError inside read_json (which caught only
    ValueError) and answered 500: on POST turns, inside an unknown field, inside a resume answer."""
    turn = parked_turn(alice)
    cases = [
        f"{BASE}/s1/turns",
        '{"text":"hi","replace":' + DEEP + "}",
        f"{BASE}/s1/turns",
        '{"text":"hi","unknown":' + DEEP + "}",
        f"{BASE}/parked/turns/{turn.pk}/resume",
        '{"input_id":"approve-refund","answer":' + DEEP + "}",
        f"{BASE}/s1/reset",
        DEEP,
    ]
    for path, raw in zip(cases[::2], cases[1::2]):
        status, body, _ = api.send("post", path, raw.encode())
        assert_bad_request(status, body, message=TOO_DEEP)
    # the bound is 64 levels: 64 is parsed (and refused for its type), 65 is too deep
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    status, body, _ = api.send("post", f"{BASE}/s1/turns", ('{"text":"hi","replace":' + ok[2:-2] + "}").encode())
    assert_bad_request(status, body, message="replace must be true or false")
    status, body, _ = api.send("post", f"{BASE}/s1/turns", ('{"text":"hi","replace":' + ok + "}").encode())
    assert_bad_request(status, body, message=TOO_DEEP)
    assert m.Turn.objects.get().pk == turn.pk and not m.Answer.objects.exists()


def test_deeply_nested_json_is_a_400_on_a_signed_webhook():
    """Issue 13.3: a signed webhook body nested 50,000 deep was a RecursionError and a 500."""
    deep = "[" * 30_000 + "]" * 30_000  # under the webhook's 64 KiB body bound
    r = signed_post(('{"session":"h1","text":"hi","user":' + deep + "}").encode())
    assert r.status_code == 400 and TOO_DEEP in r.json()["error"]["message"]
    assert not m.Turn.objects.exists()


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_deeply_nested_json_is_an_error_frame_on_the_websocket():
    """Issue 13.3: a websocket frame nested deeply raised RecursionError (status 500 frame).
    The frame bound (64 KiB) still allows 32,000 levels: the depth bound refuses them."""
    alice = await sync_to_async(make_user)("alice")
    comm, connected = await open_socket("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert connected
    await until_ready(comm)
    deep = "[" * 30_000 + "]" * 30_000
    reply = await frame_reply(comm, '{"type":"start","text":"hi","id":' + deep + "}")
    assert (reply["type"], reply["status"], reply["code"]) == ("error", 400, "bad_request"), reply
    assert TOO_DEEP in reply["message"]
    reply = await frame_reply(comm, '{"type":"reset"}')
    assert reply["type"] == "ack"  # still usable
    await comm.disconnect()


# -- 4. and 5. NUL and lone surrogates -----------------------------------------------------------------------

HOSTILE_STRINGS = ["a\u0000b", "order a\ud800b", "\udfff", "x\ud83d"]


@pytest.mark.parametrize("bad", HOSTILE_STRINGS)
def test_nul_and_lone_surrogates_are_a_400_over_http(api, alice, bad):
    """Issues 13.4 and 13.5: "\\u0000" in a turn's text or an id was a PostgreSQL DataError, and
    a lone surrogate ("order a\\ud800b") an "invalid input syntax for type json": both 500s."""
    turn = parked_turn(alice)
    bodies = [
        (f"{BASE}/s1/turns", {"text": bad}),
        (f"{BASE}/s1/turns", {"text": "hi", bad: 1}),
        (f"{BASE}/parked/turns/{turn.pk}/resume", {"input_id": bad, "answer": True}),
        (f"{BASE}/parked/turns/{turn.pk}/resume", {"input_id": "approve-refund", "answer": {"note": bad}}),
    ]
    for path, body in bodies:
        status, answer, _ = api.send("post", path, json.dumps(body).encode())  # ensure_ascii: \u escapes
        assert_bad_request(status, answer, message=BAD_STRING)
    # the same text sent as raw (invalid) UTF-8 bytes: not JSON
    raw = json.dumps({"text": bad}, ensure_ascii=False).encode("utf-8", "surrogatepass")
    status, answer, _ = api.send("post", f"{BASE}/s1/turns", raw)
    assert status == 400
    assert m.Turn.objects.get().pk == turn.pk and not m.Answer.objects.exists()


@pytest.mark.parametrize("bad", HOSTILE_STRINGS)
def test_nul_and_lone_surrogates_are_a_400_on_a_signed_webhook(bad):
    """Issues 13.4 and 13.5: the signed webhook stored NUL / a lone surrogate and answered 500."""
    for body in (
        {"session": "h2", "text": bad},
        {"session": bad, "text": "hi"},
        {"session": "h2", "text": "hi", "user": bad},
    ):
        r = signed_post(json.dumps(body).encode())
        assert r.status_code == 400, (body, r.content)
    assert not m.Turn.objects.exists()


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_nul_and_lone_surrogates_are_error_frames_on_the_websocket():
    """Issues 13.4 and 13.5: start/cancel/resume frames with NUL or a lone surrogate in the text
    or an id reached PostgreSQL and came back as status-500 error frames."""
    alice = await sync_to_async(make_user)("alice")
    comm, connected = await open_socket("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert connected
    await until_ready(comm)
    for bad in HOSTILE_STRINGS:
        for frame in (
            {"type": "start", "text": bad},
            {"type": "cancel", "turn_id": bad},
            {"type": "resume", "turn_id": "t", "input_id": bad, "answer": True},
            {"type": "resume", "turn_id": "t", "input_id": "i", "answer": [bad]},
        ):
            for raw in (json.dumps(frame), json.dumps(frame, ensure_ascii=False)):  # escaped, and raw characters
                reply = await frame_reply(comm, raw)
                assert (reply["type"], reply["status"], reply["message"]) == ("error", 400, BAD_STRING), (raw, reply)
    assert not await sync_to_async(m.Turn.objects.exists)()
    await comm.disconnect()


def test_validate_text_refuses_nul_for_callers_without_json():
    """Issue 13.4: services.validate_text (also behind the CLI and the admin) let NUL through."""
    from sessions_app.site_errors import BadRequest

    for bad in HOSTILE_STRINGS:
        with pytest.raises(BadRequest):
            services.validate_text(bad)
    assert services.validate_text("ok \U0001f600") == "ok \U0001f600"  # a paired surrogate is a character


def test_nan_and_numbers_beyond_a_double_are_a_400(api, alice):
    """Issue 13 (huge numbers): json.loads turned 1e999 into inf and accepted NaN; stored in a
    jsonb answer, PostgreSQL refused "Infinity"/"NaN" (a DataError, a 500)."""
    turn = parked_turn(alice)
    for literal in ("NaN", "Infinity", "-Infinity", "1e999", "1" * 5000):
        raw = ('{"input_id":"approve-refund","answer":' + literal + "}").encode()
        status, body, _ = api.send("post", f"{BASE}/parked/turns/{turn.pk}/resume", raw)
        assert_bad_request(status, body)
    assert not m.Answer.objects.exists()


# -- 6. and 7. websocket frame type, unknown websocket routes ---------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_a_frame_type_that_is_not_a_string_is_a_400_error_frame():
    """Issue 13.6: {"type": ["start"]} raised TypeError (unhashable type: 'list'): a 500 frame."""
    alice = await sync_to_async(make_user)("alice")
    comm, connected = await open_socket("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert connected
    await until_ready(comm)
    for kind in (["start"], {"start": 1}, 5, None, True):
        reply = await frame_reply(comm, json.dumps({"type": kind, "id": 7}))
        assert (reply["type"], reply["status"], reply["code"], reply["id"]) == ("error", 400, "bad_request", 7)
        assert "string" in reply["message"]
    reply = await frame_reply(comm, json.dumps({"type": "x" * 10_000}))
    assert reply["status"] == 400 and len(reply["message"]) < 200  # the unknown type is not echoed whole
    await comm.disconnect()


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_websocket_paths_that_match_no_route_close_instead_of_a_500():
    """Issue 13.7: a path matching no route (e.g. a 201-character session key) made URLRouter raise
    in the handshake: a 500 and a traceback in daphne. Now a bad key is 4400, any other path 4404."""
    alice = await sync_to_async(make_user)("alice")
    cookie = await cookie_for(alice)
    for path, code in (
        ("/ws/agents/ops/sessions/" + "k" * 201 + "/", 4400),
        ("/ws/agents/ops/sessions/s1", 4404),
        ("/ws/nope/", 4404),
        ("/", 4404),
        ("/ws/agents/" + "a" * 65 + "/sessions/s1/", 4404),
    ):
        comm, connected = await open_socket(path, cookie)
        assert connected, path
        frame = await comm.receive_json_from(timeout=30)
        assert frame["type"] == "error" and frame["code"] == "refused", (path, frame)
        assert await comm.receive_output(timeout=30) == {"type": "websocket.close", "code": code}, path


# -- 11. every response under /api/ is JSON ---------------------------------------------------------------------


def test_unknown_api_routes_are_json_for_every_method_even_with_debug_and_csrf(alice, settings):
    """Issue 13.11: a POST to an unknown sub-route got Django's HTML CSRF 403 (api.not_found was
    not CSRF-exempt), /api/nope/ the DEBUG HTML 404 with the URL list, and
    /api/agents/ops/sessions (no slash) an HTML 301."""
    settings.DEBUG = True
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    for method, path in (
        ("post", f"{BASE}/s1/nothing"),
        ("post", "/api/nope/"),
        ("get", "/api/nope/"),
        ("put", f"{BASE}/s1/turns/"),
        ("delete", "/api/"),
        ("get", "/api/agents/ops/webhook/"),
    ):
        response = getattr(browser, method)(path)
        assert response.status_code == 404, (method, path, response.status_code)
        assert response["Content-Type"] == "application/json", (method, path, response.content[:200])
        assert response.json()["error"]["code"] == "not_found"
    # the sessions list without its trailing slash is the list (an alias), never HTML: JSON for
    # every method, with the caller's own answer (a list, 401 anonymous, 405 for a POST)
    answers = {
        "get": browser.get("/api/agents/ops/sessions"),
        "post": browser.post("/api/agents/ops/sessions"),
        "anonymous": Client().get("/api/agents/ops/sessions"),
    }
    assert {k: r["Content-Type"] for k, r in answers.items()} == dict.fromkeys(answers, "application/json")
    assert answers["get"].status_code == 200 and "sessions" in answers["get"].json()
    assert 400 <= answers["post"].status_code < 500 and 400 <= answers["anonymous"].status_code < 500
    settings.DEBUG = False


def test_a_form_body_django_cannot_read_is_a_json_4xx(alice):
    """Issue 13.11: a cookie caller's form POST over DATA_UPLOAD_MAX_MEMORY_SIZE made the CSRF
    check raise RequestDataTooBig inside the view: a 500."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    browser.get("/accounts/login/")  # the csrftoken cookie: the check goes on to read the form
    response = browser.post(
        f"{BASE}/s1/turns", data="a=" + "x" * 300_000, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"


# -- 12. the OpenAPI document describes what the server does -------------------------------------------------------


def test_the_openapi_document_bounds_what_the_server_bounds():
    """Issue 13.12: no maximum for `limit`, no pattern or length for `session` and `input_id`,
    whitespace-only text allowed by the schema (the server refuses it), 400 documented where the
    server answers 413, the SSE response declared as a bare string."""
    doc = Client().get("/api/openapi.json").json()
    paths = doc["paths"]

    def named(schema):  # a body's schema is a named component of the document
        return doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]

    session = next(
        p for p in paths["/api/agents/{agent}/sessions/{session}/turns"]["parameters"] if p["name"] == "session"
    )["schema"]
    assert session["maxLength"] == 200 and session["pattern"] == f"^{services.SESSION_KEY_RE.pattern}$"
    events = paths["/api/agents/{agent}/sessions/{session}/events"]["get"]
    limit = next(p for p in events["parameters"] if p["name"] == "limit")["schema"]
    assert limit["maximum"] == 1_000_000
    resume = paths["/api/agents/{agent}/sessions/{session}/turns/{turn_id}/resume"]["post"]
    body = named(resume["requestBody"]["content"]["application/json"]["schema"])
    assert body["properties"]["input_id"]["pattern"] == f"^{services.INPUT_ID_RE.pattern}$"
    start = paths["/api/agents/{agent}/sessions/{session}/turns"]["post"]
    text = named(start["requestBody"]["content"]["application/json"]["schema"])["properties"]["text"]
    for bad in ("   ", "\t\n", "a\u0000b"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, text)
    jsonschema.validate("order mugs", text)
    assert "413" in start["responses"] and text["maxLength"] == 32_000
    sse = events["responses"]["200"]["content"]["text/event-stream"]["schema"]
    event = doc["components"]["schemas"][sse["$ref"].rsplit("/", 1)[-1]]
    assert event["type"] == "object" and event["properties"]["data"]["contentMediaType"] == "application/json"


# -- 13. origin port, one seq parser, updated_at --------------------------------------------------------------------


def test_the_origin_check_compares_scheme_host_and_port(settings):
    """Issue 13.13: the websocket Origin check ignored the port (http://localhost:9999 was accepted
    for a site on localhost:8000)."""
    settings.ALLOWED_HOSTS = ["localhost", "testserver", ".example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.org", "https://*.corp.example"]
    allowed = ws_origin.origin_allowed
    assert allowed("http://localhost:8000", "localhost:8000")
    assert not allowed("http://localhost:9999", "localhost:8000")
    assert not allowed("http://localhost:9999", None)
    assert not allowed("http://localhost", "localhost:8000")
    assert allowed("https://a.example.com", "a.example.com") and not allowed(
        "https://a.example.com", "a.example.com:8443"
    )
    assert not allowed("http://evil.example", "evil.example")  # the host is not allowed
    assert allowed("http://testserver", None)  # test clients send no Host: the scheme's port
    assert allowed("https://chat.example.org", "localhost:8000")
    assert not allowed("https://chat.example.org:444", "localhost:8000")
    assert not allowed("http://chat.example.org", "localhost:8000")
    assert allowed("https://x.corp.example", "localhost:8000") and not allowed("https://corp.example.evil", None)
    for junk in (
        "",
        "null",
        "localhost:8000",
        "http://",
        "http://localhost:99999",
        "ftp://localhost",
        "http://localhost:8000/path",
        "http://user@localhost:8000",
    ):
        assert not allowed(junk, "localhost:8000"), junk


def test_the_origin_check_compares_the_connections_scheme(settings):
    """Issue 35 item 5: ``Origin: https://127.0.0.1:8790`` was accepted on a plain ``ws://``
    connection to 127.0.0.1:8790 (the scheme was never compared with the connection's)."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    settings.CSRF_TRUSTED_ORIGINS = []
    allowed = ws_origin.origin_allowed
    assert allowed("http://127.0.0.1:8790", "127.0.0.1:8790", scheme="http")
    assert not allowed("https://127.0.0.1:8790", "127.0.0.1:8790", scheme="http")
    assert allowed("https://127.0.0.1:8790", "127.0.0.1:8790", scheme="https")
    assert not allowed("http://127.0.0.1:8790", "127.0.0.1:8790", scheme="https")
    headers = {b"x-forwarded-proto": "https"}
    assert ws_origin.connection_scheme({"scheme": "ws"}, headers) == "http"  # no proxy setting: not trusted
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert ws_origin.connection_scheme({"scheme": "ws"}, headers) == "https"
    assert ws_origin.connection_scheme({"scheme": "wss"}, {}) == "https"


def test_no_other_origin_is_trusted_by_default():
    """Issue 35 item 5: the default CSRF_TRUSTED_ORIGINS (http://127.0.0.1:8000, localhost:8000)
    applied to every deployment that did not set its own: a handshake from
    http://127.0.0.1:8000 to a site on another port was accepted."""
    from django.conf import settings as live

    assert live.CSRF_TRUSTED_ORIGINS == [] or "CSRF_TRUSTED_ORIGINS" in os.environ
    assert not ws_origin.origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8790", scheme="http")


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_a_socket_from_another_port_is_refused_and_the_same_origin_accepted():
    """Issue 13.13: the handshake from http://localhost:9999 to a site on localhost:8000 succeeded."""
    alice = await sync_to_async(make_user)("alice")
    cookie = await cookie_for(alice)
    comm, connected = await open_socket(
        "/ws/agents/ops/sessions/s1/", cookie, origin=b"http://localhost:9999", host=b"localhost:8000"
    )
    assert not connected
    comm, connected = await open_socket(
        "/ws/agents/ops/sessions/s1/", cookie, origin=b"http://localhost:8000", host=b"localhost:8000"
    )
    assert connected
    await until_ready(comm)
    await comm.disconnect()


def test_after_and_last_event_id_have_one_parser(api):
    """Issue 13.13: ?after= took 23 digits on the websocket but 18 on SSE, and Last-Event-ID "²"
    (str.isdigit) answered Python's raw "invalid literal for int()" message."""
    from sessions_app.site_errors import BadRequest
    from sessions_app.web.consumers import _parse_after
    from sessions_app.web.sse import parse_seq

    api.send("post", f"{BASE}/s1/turns?wait=false", b'{"text":"hi"}')
    for bad in ("²", "٣", "1" * 19, "1" * 23, "-1", "+1", "1_0", "0x1", "1.0", "\u0000"):
        status, body, _ = api.send("get", f"{BASE}/s1/events", HTTP_LAST_EVENT_ID=bad)
        assert_bad_request(status, body, message="Last-Event-ID must be a sequence number")
        assert "invalid literal" not in body["error"]["message"]
        with pytest.raises(ValueError):
            parse_seq(bad, name="x")
        with pytest.raises(BadRequest) as refused:
            _parse_after(f"after={quote(bad)}".encode())
        assert "?after= must be a sequence number" in str(refused.value)
    assert parse_seq("9" * 18, name="x") == int("9" * 18) == _parse_after(b"after=" + b"9" * 18)
    assert _parse_after(b"") == 0 == _parse_after(b"after=")


def test_a_sessions_updated_at_follows_its_turns(alice):
    """Issue 13.13: Session.updated_at never changed after creation (auto_now does not fire on
    .update()), so the session list's "updated" and its order were wrong."""
    from sessions_app.workers import tasks

    first = services.turn_start(agent="ops", key="first", text="hi", user=alice, source="http")
    services.turn_start(agent="ops", key="second", text="hi", user=alice, source="http")
    created = {s.key: s.updated_at for s in m.Session.objects.all()}
    assert [s.key for s in selectors.sessions_for_user(user=alice)] == ["second", "first"]
    tasks.run_turn(first.turn_id)  # the first session's turn settles: it is the most recent now
    row = m.Session.objects.get(key="first")
    assert row.updated_at > created["first"] and row.status == "idle"
    assert [s.key for s in selectors.sessions_for_user(user=alice)] == ["first", "second"]
    services.turn_cancel(turn_id=m.Turn.objects.get(session__key="second").pk, user=alice)
    assert [s.key for s in selectors.sessions_for_user(user=alice)] == ["second", "first"]
    services.session_reset(agent="ops", key="first", user=alice)
    assert [s.key for s in selectors.sessions_for_user(user=alice)] == ["first", "second"]
