"""``BodyLimit``, the ASGI middleware that bounds request bodies for servers that stream them to
the application (uvicorn, hypercorn; daphne's own hook: tests/hostile/test_probes.py): a declared
length over the path's limit never reaches the application, a streamed body is cut off once it
passes the limit, and a body within it passes untouched."""

from __future__ import annotations

import re
from pathlib import Path

from asgiref.sync import async_to_sync
from twisted.internet.testing import StringTransport
from twisted.web import http

from sessions_app.attachment_services import max_body_bytes
from sessions_app.web.bodylimit import BodyLimit, limit_for


def _run(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]] = ()) -> tuple[list, list]:
    seen: list = []
    sent: list = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        if seen[-1]["type"] == "http.request":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return queue.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "root_path": "", "method": "POST", "headers": list(headers)}
    async_to_sync(BodyLimit(app))(scope, receive, send)
    return seen, sent


def test_a_declared_length_over_the_limit_never_reaches_the_application():
    seen, sent = _run("/healthz", [b"x"], [(b"content-length", b"1")])
    assert seen == [] and sent[0]["status"] == 413 and b"payload_too_large" in sent[1]["body"]


def test_a_streamed_body_is_cut_off_once_it_passes_the_limit():
    limit = limit_for("/api/agents/ops/webhook")
    assert limit == 64 * 1024
    seen, sent = _run("/api/agents/ops/webhook", [b"x" * 40_000] * 100)
    assert len(seen) == 2 and seen[-1] == {"type": "http.disconnect"}  # the second chunk passes it
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]


def test_a_body_within_the_limit_passes_untouched():
    seen, sent = _run("/api/agents/ops/webhook", [b"x" * 30_000, b"y" * 30_000], [(b"content-length", b"60000")])
    assert [m["body"][:1] for m in seen] == [b"x", b"y"] and sent[0]["status"] == 200


def test_the_deploy_files_ship_the_cap():
    """The proxy in deploy/ refuses what June's largest limit (a multipart start) would refuse,
    and nothing June accepts: its client_max_body_size is exactly that limit."""
    conf = (Path(__file__).resolve().parents[2] / "deploy" / "nginx-june.conf").read_text()
    sizes = re.findall(r"^\s*client_max_body_size (\d+);", conf, re.M)
    assert sizes == [str(max_body_bytes())], sizes
    assert f"{max_body_bytes():,}" in conf
    assert re.search(r"^\s*proxy_request_buffering off;", conf, re.M)


def test_the_twisted_internals_the_daphne_hook_reads_are_there():
    """``guard_daphne`` reads the request line's path and method from ``HTTPChannel._path`` and
    ``_command`` (``Request.uri`` is set only once the body is in) and shadows ``_send100Continue``: if Twisted moves them,
    this fails (the hook then falls back to the site's largest limit for every path)."""
    channel = http.HTTPChannel()
    channel.requestFactory = http.Request
    channel.makeConnection(StringTransport())
    seen = []
    channel.allHeadersReceived = lambda: seen.append((channel._command, channel._path, channel.requests[-1].uri))
    channel.dataReceived(b"POST /a/b?c=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
    assert seen == [(b"POST", b"/a/b?c=1", b"(no uri yet)")]
    assert callable(channel._send100Continue) and callable(http.Request.gotLength)


def test_a_path_is_resolved_once_for_its_two_checks(monkeypatch, settings):
    """Under daphne a request's limit is asked at its headers and again by ``BodyLimit``: the
    path is resolved once; a limit declared as a callable is still read at each ask."""
    from sessions_app.web import bodylimit

    calls = []
    real = bodylimit.resolve
    monkeypatch.setattr(bodylimit, "resolve", lambda path: calls.append(path) or real(path))
    path = "/api/agents/ops/sessions/s-once/turns"
    first = limit_for(path)
    assert limit_for(path) == first and calls == [path]
    settings.JUNE_ATTACHMENT_MAX_BYTES = 1  # the turns view's limit follows the settings, cached or not
    assert limit_for(path) != first and calls == [path]
    for i in range(bodylimit.DECLARED_KEPT + 1):  # bounded
        limit_for(f"/api/agents/ops/sessions/s{i}/turns")
    assert len(bodylimit._declared) == bodylimit.DECLARED_KEPT


def test_a_path_the_limit_resolved_is_not_resolved_again_for_the_slash_check(monkeypatch):
    """``APPEND_SLASH``'s check (Django's ``CommonMiddleware``) resolved every path without a
    slash, under daphne after the body limit had resolved it at the request's headers: a path
    the limit found a route for is not resolved again, and one with none is still redirected
    to its slashed form when that has a route."""
    from django.http import HttpResponse
    from django.middleware import common
    from django.test import RequestFactory

    from sessions_app.web import bodylimit, syncstack

    checked = []
    real = common.is_valid_path
    monkeypatch.setattr(common, "is_valid_path", lambda path, urlconf=None: checked.append(path) or real(path, urlconf))
    middleware = syncstack.CommonMiddleware(lambda request: HttpResponse())
    path = "/api/agents/ops/sessions/s-slash/turns"
    assert bodylimit.has_route(path) is None
    assert middleware.should_redirect_with_slash(RequestFactory().post(path)) is False and checked == [path]
    checked.clear()
    limit_for(path)
    assert bodylimit.has_route(path) is True
    assert middleware.should_redirect_with_slash(RequestFactory().post(path)) is False and checked == []
    bare = "/agents/ops"  # no route; "/agents/ops/" has one
    limit_for(bare)
    assert bodylimit.has_route(bare) is False
    assert middleware.should_redirect_with_slash(RequestFactory().get(bare)) is True
