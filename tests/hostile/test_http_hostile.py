"""Property: hostile requests to every HTTP endpoint (the API and the inbound webhook) get the
documented success or a 4xx JSON error: never a 5xx, never an error or a traceback in the
server's log; afterwards the database is consistent, and every turn the hostile traffic got
accepted still runs to its end on the real worker path (no turn stuck)."""

from __future__ import annotations

import logging
import time
from urllib.parse import urlencode

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from sessions_app import models as m
from sessions_app import services
from sessions_app.proactive.channels import sign
from sessions_app.workers import tasks

from . import strategies as hs
from .support import BASE, Api, LogWatch, assert_consistent, check_answer, hostile, make_user, path_segment, token_for

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hostile-webhook-secret"


@pytest.fixture
def quick(settings):
    """Waits and streams end at once: the property is about answers, not about turns running."""
    settings.JUNE_API_WAIT_SECONDS = 0.05
    settings.JUNE_API_STREAM_SECONDS = 0.05
    settings.JUNE_SSE_POLL_SECONDS = 0.02


@pytest.fixture
def watch():
    handler = LogWatch()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    assert not handler.problems(), handler.problems()[:5]


@pytest.fixture
def world(quick, watch):
    """alice (a token), an operator (a token) with a turn parked on the refund approval in her
    own session, and bob's session next to them (every answer on it must be a 403)."""
    alice, olga, bob = make_user("alice"), make_user("olga", operator=True), make_user("bob")
    parked = services.turn_start(agent="ops", key="parked", text="refund order 42 10", user=olga, source="http")
    tasks.run_turn(parked.turn_id)
    assert m.Turn.objects.get(pk=parked.turn_id).status == "suspended"
    services.turn_start(agent="ops", key="bobs", text="hello", user=bob, source="http")
    world = {"alice": Api(token_for(alice)), "olga": Api(token_for(olga)), "parked": parked.turn_id, "key": "parked"}

    def park() -> None:
        """Keep a parked turn to answer: park a new one once the last was answered."""
        if m.Turn.objects.filter(pk=world["parked"], status="suspended").exists():
            return
        world["key"] = f"parked-{m.Turn.objects.count()}"
        rec = services.turn_start(agent="ops", key=world["key"], text="refund order 7 5", user=olga, source="http")
        tasks.run_turn(rec.turn_id)
        world["parked"] = rec.turn_id

    world["park"] = park
    yield world
    assert_consistent()
    drain_and_check()


def drain_and_check() -> None:
    """Run every queued turn, in its session's order, on the real task (as a worker would):
    each ends completed, failed, cancelled or parked, or waits behind its session's park."""
    for turn in m.Turn.objects.filter(status="queued").order_by("session_id", "order"):
        tasks.run_turn(turn.pk)
    for turn in m.Turn.objects.filter(status="queued"):
        blocked = m.Turn.objects.filter(session=turn.session, status="suspended", order__lt=turn.order).exists()
        assert blocked, (turn.pk, turn.input)
    assert_consistent()


def _query(**params: str | None) -> str:
    given_params = {k: v.encode("utf-8", "surrogatepass") for k, v in params.items() if v is not None}
    return ("?" + urlencode(given_params)) if given_params else ""


def optional(*strategies: st.SearchStrategy) -> st.SearchStrategy:
    """Absent a third of the time, else mostly the first (legal) strategy."""
    return hs.mostly(st.none(), hs.mostly(strategies[0], st.one_of(*strategies)))


# -- the API --------------------------------------------------------------------------------------------


@hostile(100)
@given(
    key=hs.session_keys,
    wait=optional(hs.legal_bools, hs.query_bools),
    replace=optional(hs.legal_bools, hs.query_bools),
    stream=st.booleans(),
    body=hs.body(
        {"text": st.one_of(hs.strings, hs.values), "replace": st.one_of(st.booleans(), hs.values)},
        raw_at=("text", "replace"),
        plausible={"text": hs.legal_texts, "replace": st.booleans()},
    ),
)
def test_start_turn(world, key, wait, replace, stream, body):
    api = world["alice"]
    extra = {"HTTP_ACCEPT": "text/event-stream"} if stream else {}
    path = f"{BASE}/{path_segment(key)}/turns" + _query(wait=wait, replace=replace)
    status, answer, response = api.send("post", path, body, **extra)
    check_answer("POST turns", status, answer, response, ok=(200, 202))
    if status == 200 and stream:
        assert response["Content-Type"] == "text/event-stream" and answer.startswith(b"retry:")


@hostile(60)
@given(key=hs.session_keys, turn_id=hs.turn_ids, own=st.booleans())
def test_read_turn(world, key, turn_id, own):
    if own:
        key, turn_id = "parked", world["parked"]
    api = world["olga"]
    status, answer, response = api.send("get", f"{BASE}/{path_segment(key)}/turns/{path_segment(turn_id)}")
    check_answer("GET turns/<id>", status, answer, response, ok=(200,))


@hostile(80)
@given(
    which=st.sampled_from(["parked", "parked", "random", "alice"]),
    turn_id=hs.turn_ids,
    body=hs.body(
        {
            "input_id": st.one_of(st.just("approve-refund"), hs.strings, hs.values),
            "answer": st.one_of(st.booleans(), hs.values),
        },
        raw_at=("answer", "input_id"),
        plausible={"input_id": st.just("approve-refund"), "answer": st.one_of(st.booleans(), hs.values)},
    ),
)
def test_resume_turn(world, which, turn_id, body):
    api = world["alice"] if which == "alice" else world["olga"]
    world["park"]()
    if which != "random":
        turn_id = world["parked"]
    path = f"{BASE}/{world['key']}/turns/{path_segment(turn_id)}/resume"
    status, answer, response = api.send("post", path, body)
    check_answer("POST turns/<id>/resume", status, answer, response, ok=(200, 202))
    if which == "alice":
        assert status in (400, 403, 413), answer  # never anybody else's session


@hostile(60)
@given(
    existing=st.booleans(),
    turn_id=hs.turn_ids,
    body=st.one_of(st.just(b""), st.just(b"{}"), hs.whole_bodies, hs.body({"reason": hs.values})),
)
def test_cancel_turn(world, existing, turn_id, body):
    api = world["alice"]
    key = "c1"
    if existing:
        api.send("post", f"{BASE}/{key}/turns?wait=false", b'{"text": "to be cancelled"}')
        turn_id = m.Turn.objects.filter(session__key=key).order_by("-order").values_list("pk", flat=True).first()
    status, answer, response = api.send("post", f"{BASE}/{key}/turns/{path_segment(turn_id)}/cancel", body)
    check_answer("POST turns/<id>/cancel", status, answer, response, ok=(200, 202))


@hostile(50)
@given(key=hs.session_keys, body=st.one_of(st.just(b""), hs.whole_bodies, hs.body({"generation": hs.values})))
def test_reset(world, key, body):
    status, answer, response = world["alice"].send("post", f"{BASE}/{path_segment(key)}/reset", body)
    check_answer("POST reset", status, answer, response, ok=(200,))


@hostile(50)
@given(key=st.one_of(st.just("parked"), st.just("bobs"), hs.session_keys))
def test_pending(world, key):
    status, answer, response = world["olga"].send("get", f"{BASE}/{path_segment(key)}/pending")
    check_answer("GET pending", status, answer, response, ok=(200,))
    if key == "bobs":
        assert status == 403


def _forkable(world) -> str:
    """alice's session "forks", idle, with two ended turns: real fork points at 0 and 2."""
    if not m.Session.objects.filter(key="forks").exists():
        for text in ("hello", "how are you"):
            _, answer, _ = world["alice"].send(
                "post", f"{BASE}/forks/turns?wait=false", f'{{"text": "{text}"}}'.encode()
            )
            tasks.run_turn(answer["turn_id"])
    for turn in m.Turn.objects.filter(session__key="forks", status="queued").order_by("order"):
        tasks.run_turn(turn.pk)  # what the last example queued: the session is idle again
    return "forks"


positions = hs.mostly(st.sampled_from(["0", "1", "2", "3", "999999999"]), st.one_of(hs.strings.filter(bool), hs.seqs))


@hostile(60)
@given(
    index=positions,
    body=st.one_of(st.just(b""), hs.whole_bodies, hs.body({"text": hs.legal_texts, "attachments": hs.values})),
)
def test_fork(world, index, body):
    key = _forkable(world)
    status, answer, response = world["alice"].send("post", f"{BASE}/{key}/messages/{path_segment(index)}/fork", body)
    check_answer("POST messages/<index>/fork", status, answer, response, ok=(202,))


@hostile(40)
@given(generation=positions, last=st.booleans(), turn_id=hs.turn_ids, body=st.one_of(st.just(b""), hs.whole_bodies))
def test_switch_and_regenerate(world, generation, last, turn_id, body):
    key = _forkable(world)
    status, answer, response = world["alice"].send(
        "post", f"{BASE}/{key}/branches/{path_segment(generation)}/switch", body
    )
    check_answer("POST branches/<generation>/switch", status, answer, response, ok=(200,))
    if last:
        turn_id = m.Turn.objects.filter(session__key=key).order_by("-order").values_list("pk", flat=True).first()
    status, answer, response = world["alice"].send(
        "post", f"{BASE}/{key}/turns/{path_segment(turn_id)}/regenerate", body
    )
    check_answer("POST turns/<id>/regenerate", status, answer, response, ok=(202,))
    status, answer, response = world["olga"].send("get", f"{BASE}/{key}/branches")
    check_answer("GET branches", status, answer, response, ok=(200,))
    assert status == 403  # never anybody else's session


legal_numbers = st.sampled_from(["1", "3", "0.5", "1e-05", "100"])


@hostile(60)
@given(
    key=st.one_of(st.just("parked"), hs.session_keys),
    last_id=optional(hs.legal_seqs, hs.seqs),
    after=optional(hs.legal_seqs, hs.seqs),
    until=optional(st.just("terminal"), hs.strings),
    limit=optional(legal_numbers, hs.query_numbers),
    timeout=optional(legal_numbers, hs.query_numbers),
)
def test_events(world, key, last_id, after, until, limit, timeout):
    extra = {}
    if last_id is not None:
        extra["HTTP_LAST_EVENT_ID"] = last_id.replace("\n", " ").replace("\r", " ")  # one header line
    path = f"{BASE}/{path_segment(key)}/events" + _query(after=after, until=until, limit=limit, timeout=timeout)
    status, answer, response = world["olga"].send("get", path, **extra)
    check_answer("GET events", status, answer, response, ok=(200,))
    if status == 200:
        assert response["Content-Type"] == "text/event-stream" and answer.startswith(b"retry:")


@hostile(60)
@given(
    method=st.sampled_from(["get", "post", "put", "patch", "delete", "head", "options"]),
    tail=st.one_of(
        hs.strings,
        st.sampled_from(
            [
                "nope/",
                "agents/ops/sessions",
                "agents/ops/sessions/s1/x",
                "agents/ops/sessions/s1/turns/",
                "openapi.json/",
                "agents/ops/webhook/",
                "agents/" + "a" * 300,
            ]
        ),
    ),
    body=st.one_of(st.just(b""), hs.whole_bodies),
)
def test_unknown_routes_and_methods(world, method, tail, body):
    """Everything under /api/ answers JSON: unknown routes (any method), wrong methods on known ones."""
    client = Client(raise_request_exception=False, enforce_csrf_checks=True)
    path = "/api/" + "/".join(path_segment(part) for part in tail.split("/"))
    if method in ("get", "head"):
        response = getattr(client, method)(path)
    else:
        response = getattr(client, method)(path, data=body, content_type="application/json")
    assert response["Content-Type"].startswith("application/json"), (method, path, response.content[:200])
    answer = response.json() if response.content else {"error": {"code": "", "message": ""}}  # HEAD: no body
    check_answer("any other /api/ route", response.status_code, answer, response, ok=(200,))


# -- the inbound webhook ------------------------------------------------------------------------------------


@hostile(100)
@given(
    signed=hs.mostly(st.just("valid"), st.sampled_from(["none", "bad"])),
    content_type=hs.mostly(
        st.sampled_from(["application/json", "application/json; charset=utf-8"]),
        st.sampled_from(["text/plain", "application/x-www-form-urlencoded", ""]),
    ),
    body=hs.body(
        {
            "session": st.one_of(st.sampled_from(["hook-1", "hook-2"]), hs.strings, hs.values),
            "text": st.one_of(hs.strings, hs.values),
            "user": st.one_of(hs.strings, hs.values),
        },
        raw_at=("session", "text", "user"),
        plausible={
            "session": hs.legal_keys.map("hook-".__add__),
            "text": hs.legal_texts,
            "user": st.from_regex(r"\A[\w.@:+-]{1,20}\Z"),
        },
    ),
)
def test_webhook(world, monkeypatch, signed, content_type, body, settings):
    settings.JUNE_WEBHOOK_SECRETS = {"OPS": SECRET}
    settings.JUNE_WEBHOOK_URLS = {}
    headers = {}
    if signed != "none":
        ts = str(int(time.time()))
        headers = {
            "HTTP_X_JUNE_TIMESTAMP": ts,
            "HTTP_X_JUNE_SIGNATURE": sign(SECRET.encode(), ts, body) if signed == "valid" else "sha256=00",
        }
    response = Client(raise_request_exception=False).post(
        "/api/agents/ops/webhook", data=body, content_type=content_type, **headers
    )
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    check_answer("POST webhook", response.status_code, response.json(), response, ok=(202,))
