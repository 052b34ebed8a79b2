"""An attacker's probes against a real daphne: request bodies refused before they are read, and
``/readyz`` that anonymous clients cannot flip.

Bodies: a 2 GB POST to ``/healthz`` was answered 405 after 23.6 s with 2.14 GB of temporary files
held by daphne; a 300 MiB upload to ``…/attachments`` (limit 5 MiB) got its 413 after ~309 MB
was spooled; chunked uploads and the webhook too. Every path the site routes (anonymous, with a
session cookie, with a bearer token) now answers a body larger than its limit with a JSON 413:
by its declared ``Content-Length`` before a byte of the body is sent (the client sends none: a
server that waited for it would never answer), and as a chunked one streams, with no more than
the path's limit spooled.
"""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from sessions_app.web.bodylimit import limit_for
from tests.hostile.server import request, start_daphne
from tests.hostile.support import make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = 300 * 1024 * 1024


@pytest.fixture(scope="module")
def daphne(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from start_daphne(tmp_path_factory.mktemp("probes"), JUNE_RATE_LIMITS="0")


def _routes(patterns, prefix: str = "") -> list[str]:
    """A sample path for every route of the site (converters filled in, regex routes whose
    pattern is a plain path kept), each resolvable."""
    found = []
    for p in patterns:
        text = str(p.pattern)
        if isinstance(p.pattern.regex, re.Pattern) and text.startswith("^"):  # a re_path
            text = text.strip("^$").replace("/?", "/").replace("\\", "")
            if re.search(r"[\[\]()+*?{}|]", text):
                continue
        text = re.sub(r"<(?:\w+:)?\w+>", "k1", text)
        if isinstance(p, URLResolver):
            found += _routes(p.url_patterns, prefix + text)
        elif isinstance(p, URLPattern):
            found.append("/" + prefix + text)
    return sorted({path for path in found if _resolves(path)})


def _resolves(path: str) -> bool:
    try:
        resolve(path)
    except Exception:
        return False
    return True


ROUTES = _routes(get_resolver().url_patterns) + ["/no/such/path"]


@pytest.fixture
def callers():
    """Headers for each kind of caller: anonymous, a logged-in browser, an API token."""
    user = make_user("prober")
    client = Client()
    client.force_login(user)
    return {
        "anonymous": {},
        "session": {"Cookie": f"sessionid={client.cookies['sessionid'].value}"},
        "token": {"Authorization": f"Bearer {token_for(user)}"},
    }


def test_the_routes_cover_the_site():
    """The probe list is the site's own routes: June's API, pages, webhook, probes, the admin."""
    for needle in ("/healthz", "/readyz", "/attachments", "/turns", "/webhook", "/admin/", "/reset", "/sessions/new"):
        assert any(needle in path for path in ROUTES), needle
    assert len(ROUTES) > 40


def _refused(answer, limit: int) -> None:
    assert answer.status == 413, (answer.status, answer.head, answer.body[:200])
    assert b"connection: close" in answer.head.lower()
    assert json.loads(answer.body)["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("caller", ["anonymous", "session", "token"])
def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(daphne, callers, caller):
    """Pins bodies spooled before the refusal: only the headers are sent (Content-Length 300
    MiB), and every route answers 413 at once, holding no temporary file (a server that read
    the body first would wait for it: no answer within the timeout)."""
    for path in ROUTES:
        for method in ("POST", "PUT"):
            spooled: list[int] = []
            answer = request(
                daphne.port,
                method,
                path,
                {**callers[caller], "Content-Length": str(HUGE), "Content-Type": "application/octet-stream"},
                on_answer=lambda: spooled.append(daphne.spooled()),
            )
            _refused(answer, limit_for(path))
            assert spooled == [0], (path, spooled)


@pytest.mark.parametrize("caller", ["anonymous", "session", "token"])
def test_a_chunked_body_is_refused_once_it_passes_the_limit(daphne, callers, caller):
    """Chunked bodies (no declared length) are counted as they stream: the answer is a 413 once
    the limit is passed, and the server never holds more than the limit in temporary files
    (sampled after every 64 KiB sent, and at the answer). The body is a 2 GB stream of zeros
    that the client stops sending once the answer comes."""
    biggest = 0
    for path in ROUTES:
        limit = limit_for(path)
        spooled: list[int] = []
        answer = request(
            daphne.port,
            "POST",
            path,
            {**callers[caller], "Transfer-Encoding": "chunked", "Content-Type": "multipart/form-data; boundary=x"},
            body_bytes=2 * 1024**3,
            chunked=True,
            on_answer=lambda: spooled.append(daphne.spooled()),
            while_sending=lambda: spooled.append(daphne.spooled()),
        )
        _refused(answer, limit)
        assert max(spooled) <= limit, (path, max(spooled), limit)
        assert answer.sent < limit + 64 * 1024 * 1024, (path, answer.sent)  # the kernel's buffers, at most
        biggest = max(biggest, *spooled)
    print(f"largest spool of a refused chunked body: {biggest:,} bytes")


def test_bodies_within_the_limits_still_work(daphne, callers):
    """The limits refuse only what is over them: a webhook body under 64 KiB reaches the view
    (its 401: unsigned), a JSON start reaches the API, an upload its validation."""
    with httpx.Client(base_url=daphne.url, timeout=30) as client:
        hook = client.post("/api/agents/ops/webhook", content=b"{}" + b" " * 60_000)
        assert hook.status_code in (401, 404), hook.text
        api = client.post(
            "/api/agents/ops/sessions/probe-ok/turns?wait=0",
            json={"text": "hello"},
            headers=callers["token"],
        )
        assert api.status_code == 202, api.text
        upload = client.post(
            "/api/agents/ops/sessions/probe-ok/attachments",
            files={"file": ("a.txt", b"x" * 2_000_000, "text/plain")},
            headers=callers["token"],
        )
        assert upload.status_code == 415, upload.text  # read and judged: not an image or a PDF


def test_readyz_under_concurrent_anonymous_probes_never_fails_the_monitor(daphne):
    """Pins readiness flipped by anonymous clients: three curl loops made a load balancer's probe
    (every 0.5 s) fail 14 of 40 times, up to 3 in a row. Three anonymous loops here, and a
    monitor probing every 0.5 s for 8 s: every one of its probes is a 200."""
    stop = threading.Event()
    crowd: list[int] = []

    def loop() -> None:
        with httpx.Client(base_url=daphne.url, timeout=30) as client:
            while not stop.is_set():
                crowd.append(client.get("/readyz").status_code)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    monitor: list[int] = []
    try:
        with httpx.Client(base_url=daphne.url, timeout=30) as client:
            for _ in range(16):
                started = time.monotonic()
                monitor.append(client.get("/readyz").status_code)
                stop.wait(max(0.5 - (time.monotonic() - started), 0))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert monitor == [200] * 16, monitor
    assert len(crowd) > 16 and set(crowd) == {200}, (len(crowd), set(crowd))
