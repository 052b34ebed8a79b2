"""A JSON ``POST …/turns?wait=false`` through the site's ASGI application is served whole on a
thread of ``StartGate``'s pool, not by Django's ASGI handler: every answer — the 202 and each
refusal — must be the one Django's own handling gives (status, JSON body, the headers a client
reads), and a refusal must leave nothing. Each case is sent both ways and compared."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.asgi import get_asgi_application
from django.test import Client

from june.asgi import http_application
from sessions_app import models as m
from sessions_app.web.startgate import StartGate
from tests.integration.test_api import BASE, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)

HEADERS = ("content-type", "location", "www-authenticate", "retry-after", "allow")


@pytest.fixture
def site():
    """The site's HTTP application (body limits, the start pool, Django), its pool shut after."""
    app = http_application(get_asgi_application())
    yield app
    gate = app.app
    assert isinstance(gate, StartGate) and gate.serve is not None
    if gate._pool is not None:
        gate._pool.shutdown()


def _asgi(app, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "headers": [(b"host", b"testserver"), (b"content-length", str(len(body)).encode())]
        + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body}]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    got = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], got, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _django(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items() if k.lower() != "content-type"}
    response = Client().post(path, body, content_type=headers.get("Content-Type", ""), **extra)
    return response.status_code, {k.lower(): v for k, v in response.items()}, response.content


def _same(site, path: str, body: bytes, headers: dict[str, str], *, turn_ids: bool = False) -> tuple[int, dict]:
    """Both ways; the pool's answer must be Django's (a new turn's id aside, and a wait in seconds
    that the two requests, made one after the other, may read a second apart)."""
    a_status, a_headers, a_body = _asgi(site, path, body, headers)
    b_status, b_headers, b_body = _django(path, body, headers)
    a, b = json.loads(a_body), json.loads(b_body)
    if turn_ids:
        for d, h in ((a, a_headers), (b, b_headers)):
            h["location"] = h["location"].replace(d.pop("turn_id"), "<id>")
    waits = [d.get("error", {}).pop("retry_after", None) for d in (a, b)]
    if None not in waits:
        assert abs(waits[0] - waits[1]) <= 1, waits
        assert abs(int(a_headers["retry-after"]) - int(b_headers["retry-after"])) <= 1
        a_headers["retry-after"] = b_headers["retry-after"]
    assert (a_status, a) == (b_status, b), (a_body, b_body)
    assert {k: a_headers.get(k) for k in HEADERS} == {k: b_headers.get(k) for k in HEADERS}
    return a_status, a


def _json(text: str = "hello", **more) -> bytes:
    return json.dumps({"text": text, **more}).encode()


def test_every_answer_of_the_pool_is_djangos(site, settings):
    settings.JUNE_RATE_LIMITS = False
    alice, bob = make_user("alice"), make_user("bob")
    mine = {"Authorization": f"Bearer {token_for(alice)}", "Content-Type": "application/json"}
    theirs = {**mine, "Authorization": f"Bearer {token_for(bob)}"}
    start = f"{BASE}/s1/turns?wait=false"
    assert _same(site, start, _json(), mine, turn_ids=True)[0] == 202
    assert m.Turn.objects.filter(session__key="s1").count() == 2
    refusals = {
        "no credentials": (start, _json(), {"Content-Type": "application/json"}, 401),
        "a bad token": (start, _json(), {**mine, "Authorization": "Bearer nope"}, 401),
        "a bad header": (start, _json(), {**mine, "Authorization": "Basic x"}, 401),
        "another's session": (start, _json(), theirs, 403),
        "an unknown agent": ("/api/agents/nope/sessions/s1/turns?wait=false", _json(), mine, 404),
        "a bad key": (f"{BASE}/bad%20key/turns?wait=false", _json(), mine, 400),
        "not JSON": (start, b"{", mine, 400),
        "no text": (start, _json(""), mine, 400),
        "an unknown field": (start, _json(colour="red"), mine, 400),
        "a text too long": (start, _json("x" * (settings.JUNE_MAX_TEXT_CHARS + 1)), mine, 413),
        "JSON sent as text": (start, _json(), {**mine, "Content-Type": "text/plain"}, 202),  # as before
    }
    for name, (path, body, headers, status) in refusals.items():
        assert _same(site, path, body, headers, turn_ids=status == 202)[0] == status, name
    m.Turn.objects.filter(session__key="s1").update(status="suspended")
    assert _same(site, start, _json(), mine)[0] == 409  # a parked session
    assert m.Turn.objects.count() == 4 and m.Session.objects.count() == 1


def test_a_rate_limited_start_is_djangos_429(site, settings):
    settings.JUNE_RATE_LIMITS = True
    settings.JUNE_RATE_TURNS_PER_MINUTE = 1
    settings.JUNE_QUOTA_CACHE_SECONDS = 0
    alice = make_user("alice")
    mine = {"Authorization": f"Bearer {token_for(alice)}", "Content-Type": "application/json"}
    status, headers, _ = _asgi(site, f"{BASE}/r1/turns?wait=false", _json(), mine)
    assert status == 202 and headers["location"].startswith(f"{BASE}/r1/turns/")
    status, body = _same(site, f"{BASE}/r2/turns?wait=false", _json(), mine)
    assert status == 429 and body["error"]["limit"] == "JUNE_RATE_TURNS_PER_MINUTE"
    assert not m.Session.objects.filter(key="r2").exists()


def test_a_cookie_start_through_the_pool_still_needs_its_csrf_token(site):
    """A browser's start (the session cookie) is not exempt from CSRF because the pool serves it."""
    alice = get_user_model().objects.create_user("carol", password="pw-carol-123")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    cookie = browser.cookies["sessionid"].value
    headers = {"Cookie": f"sessionid={cookie}", "Content-Type": "application/json"}
    status, _, body = _asgi(site, f"{BASE}/c1/turns?wait=false", _json(), headers)
    assert (status, json.loads(body)["error"]["code"]) == (403, "csrf_failed")
    assert not m.Session.objects.exists()


def test_an_answered_start_leaves_nothing_for_the_garbage_collector(site, settings, monkeypatch):
    """Django's middleware leave a request in reference cycles (its lazy user, its message
    storages): the pool lets go of each answered request, so it and all it holds are freed at
    once, not at the collector's next pass (under a burst, those passes were a large share of
    the web process's CPU)."""
    import gc
    import weakref

    settings.JUNE_RATE_LIMITS = False
    alice = make_user("alice")
    mine = {"Authorization": f"Bearer {token_for(alice)}", "Content-Type": "application/json"}
    start = f"{BASE}/g1/turns?wait=false"
    handler = site.app.serve.handler
    answered = handler.get_response
    requests: list[weakref.ref] = []

    def get_response(request):
        requests.append(weakref.ref(request))
        return answered(request)

    monkeypatch.setattr(handler, "get_response", get_response)
    assert _asgi(site, start, _json(), mine)[0] == 202  # the pool's thread and its caches warmed
    gc.collect()
    gc.disable()
    try:
        assert _asgi(site, start, _json("again"), mine)[0] == 202
        assert requests[-1]() is None  # freed when answered: no collection ran
    finally:
        gc.enable()


def test_a_starts_path_is_resolved_once_for_its_body_limit_and_its_view(site, settings, monkeypatch):
    """Under daphne a start's limit is read at its headers (``guard_daphne``), which resolves its
    path; the pool's handler takes that route, not resolving the path again, once."""
    from django.urls.resolvers import URLResolver

    from sessions_app.web import bodylimit

    settings.JUNE_RATE_LIMITS = False
    alice = make_user("alice")
    mine = {"Authorization": f"Bearer {token_for(alice)}", "Content-Type": "application/json"}
    path = f"{BASE}/once/turns"
    bodylimit.limit_for(path, keep_match=True)  # what daphne's hook does with a start's headers
    resolved: list[str] = []
    real = URLResolver.resolve

    def resolve(self, where):
        if where.startswith("/"):  # the root's: the nested resolvers see the rest of the path
            resolved.append(where)
        return real(self, where)

    monkeypatch.setattr(URLResolver, "resolve", resolve)
    assert _asgi(site, path + "?wait=false", _json(), mine)[0] == 202
    assert resolved == []
    assert _asgi(site, path + "?wait=false", _json("again"), mine)[0] == 202  # taken once: resolved now
    assert resolved == [path]
