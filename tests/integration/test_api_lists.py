"""The HTTP API's lists and the approvals API (issue 17, items 13 and 14).

``GET /api/agents/<agent>/sessions/`` (the caller's sessions, newest activity first, paginated),
``GET …/turns`` (paginated, newest first), ``GET /api/approvals/`` (every parked request the
caller may answer, across sessions, oldest first) and ``POST /api/approvals/<turn>/answer``
(the inbox's rules and refusals, recorded ``via="api"``); ``/api/docs/`` renders the document.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app import models as m
from sessions_app import wiring

from .test_api import BASE, Api, inline_worker, make_user, token_for  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice():
    return make_user("alice")


@pytest.fixture
def api(alice):
    return Api(token_for(alice))


def _queue(api, key: str, text: str) -> str:
    status, body, _ = api.post(f"{BASE}/{key}/turns?wait=false", {"text": text})
    assert status == 202, body
    return body["turn_id"]


def test_sessions_list_is_the_callers_newest_activity_first_and_paginated(api, alice):
    for key in ("a", "b", "c"):
        _queue(api, key, f"hello {key}")
    bob = Api(token_for(make_user("bob")))
    _queue(bob, "bobs", "mine")
    now = timezone.now()
    # last activity: b, then c, then a (updated_at is the session's activity stamp)
    for key, ago in (("a", 30), ("b", 10), ("c", 20)):
        m.Session.objects.filter(key=key).update(updated_at=now - timedelta(seconds=ago))
    status, page, _ = api.get("/api/agents/ops/sessions/?limit=2")
    assert status == 200
    assert [s["session"] for s in page["sessions"]] == ["b", "c"]
    first = page["sessions"][0]
    assert first["agent"] == "ops" and first["status"] in ("new", "idle", "running")
    assert first["preview"] == "hello b" and first["last_turn"]["status"] == "queued"
    assert first["url"] == "/api/agents/ops/sessions/b/"
    assert page["next"]
    status, rest, _ = api.get(page["next"])
    assert status == 200 and [s["session"] for s in rest["sessions"]] == ["a"] and rest["next"] is None
    # bob sees only his own
    status, his, _ = bob.get("/api/agents/ops/sessions/")
    assert [s["session"] for s in his["sessions"]] == ["bobs"]
    # errors are JSON
    assert api.get("/api/agents/nope/sessions/")[0] == 404
    assert api.get("/api/agents/ops/sessions/?cursor=garbage")[1]["error"]["code"] == "bad_request"
    assert api.get("/api/agents/ops/sessions/?cursor=" + "9" * 18 + "." + "9" * 18)[0] == 400  # year 33658
    assert api.get("/api/agents/ops/sessions/?cursor=1." + "9" * 20)[0] == 400
    assert api.get("/api/agents/ops/sessions/?limit=0")[0] == 400
    assert api.get("/api/agents/ops/sessions/?limit=201")[0] == 400
    assert Api(None).get("/api/agents/ops/sessions/")[0] == 401


def test_the_sessions_list_answers_without_its_trailing_slash(api, alice):
    """``GET /api/agents/ops/sessions`` (no slash, as the API's other collections are spelled)
    was a 404 "no API route"."""
    _queue(api, "a", "hello a")
    status, page, _ = api.get("/api/agents/ops/sessions?limit=5")
    assert status == 200 and [s["session"] for s in page["sessions"]] == ["a"]
    assert Api(None).get("/api/agents/ops/sessions")[0] == 401


def test_turns_list_is_paginated_newest_first(api):
    ids = [_queue(api, "s1", f"message {n}") for n in range(5)]
    status, page, _ = api.get(f"{BASE}/s1/turns?limit=2")
    assert status == 200
    assert [t["turn_id"] for t in page["turns"]] == [ids[4], ids[3]]
    assert page["turns"][0]["input_text"] == "message 4" and page["turns"][0]["status"] == "queued"
    seen = [t["turn_id"] for t in page["turns"]]
    while page["next"]:
        status, page, _ = api.get(page["next"])
        assert status == 200
        seen += [t["turn_id"] for t in page["turns"]]
    assert seen == ids[::-1]
    # another user's session: 403; an unknown one: 404; a bad cursor: 400
    bob = Api(token_for(make_user("bob")))
    assert bob.get(f"{BASE}/s1/turns")[0] == 403
    assert api.get(f"{BASE}/never/turns")[0] == 404
    assert api.get(f"{BASE}/s1/turns?cursor=-1")[0] == 400
    assert api.get(f"{BASE}/s1/turns?cursor=" + "9" * 20)[0] == 400  # past a bigint: refused, not a 500
    assert api.get(f"{BASE}/s1/turns?cursor=" + "9" * 18)[1]["turns"]  # the largest accepted: all of them
    # POST on the same path still starts a turn
    assert api.post(f"{BASE}/s1/turns?wait=false", {"text": "more"})[0] == 202


def test_approvals_lists_what_the_caller_may_answer_and_answers_with_the_inbox_rules(
    inline_worker, api, alice, monkeypatch
):
    status, parked, _ = api.post(f"{BASE}/r1/turns", {"text": "refund order 42 10"})
    assert status == 200 and parked["status"] == "suspended"
    first = parked["turn_id"]
    carol = Api(token_for(make_user("carol")))
    status, later, _ = carol.post(f"{BASE}/r2/turns", {"text": "refund order 7 25"})
    second = later["turn_id"]

    olga = make_user("olga", operator=True)
    olga.is_staff = True  # operators: active staff members of the operators group
    olga.save()
    ops = Api(token_for(olga))
    status, listing, _ = ops.get("/api/approvals/")
    assert status == 200
    items = listing["approvals"]
    assert [a["turn_id"] for a in items] == [first, second], "across sessions, oldest first"
    item = items[0]
    assert item["request"]["id"] == "approve-refund" and item["request"]["answerers"]["policy"] == "operator"
    assert item["requested_by"] == "alice" and item["session"] == "r1" and item["agent"] == "ops"
    assert item["call"]["name"] == "issue_refund" and item["parked_at"]
    assert item["turn_url"] == f"{BASE}/r1/turns/{first}" and item["answer_url"] == f"/api/approvals/{first}/answer"
    # not an operator: nothing listed, and answering is refused (403) — also for the owner
    assert api.get("/api/approvals/")[1] == {"approvals": []}
    status, body, _ = api.post(f"/api/approvals/{first}/answer", {"input_id": "approve-refund", "answer": True})
    assert status == 403 and body["error"]["code"] == "forbidden"
    # the inbox's refusals
    assert ops.post(f"/api/approvals/{first}/answer", {"input_id": "other", "answer": True})[0] == 409
    assert ops.post(f"/api/approvals/{first}/answer", {"input_id": "approve-refund", "answer": "yes"})[0] == 422
    assert ops.post(f"/api/approvals/{first}/answer", {"answer": True})[0] == 400
    assert ops.post("/api/approvals/0123456789abcdef/answer", {"input_id": "x", "answer": True})[0] == 404
    assert ops.get(f"/api/approvals/{first}/answer")[0] == 405
    agent = wiring.agent("ops")
    good = agent.authorize_answer

    def broken(**kwargs):
        raise RuntimeError("directory unreachable")

    monkeypatch.setattr(agent, "authorize_answer", broken)
    status, body, _ = ops.post(f"/api/approvals/{first}/answer", {"input_id": "approve-refund", "answer": True})
    assert status == 500 and body["error"]["code"] == "authorize_answer_failed"
    monkeypatch.setattr(agent, "authorize_answer", good)
    assert not m.Answer.objects.exists() and m.Turn.objects.get(pk=first).status == "suspended"
    # answered: recorded via the API, the turn runs on, and it is no longer listed
    status, body, _ = ops.post(
        f"/api/approvals/{first}/answer", {"input_id": "approve-refund", "answer": True}, REMOTE_ADDR="10.9.8.7"
    )
    assert status == 200 and body["status"] == "completed" and "refunded" in body["text"], body
    answer = m.Answer.objects.get()
    assert (answer.turn_id, answer.via, answer.user, answer.answer, answer.remote_addr) == (
        first,
        "api",
        olga,
        True,
        "10.9.8.7",
    )
    assert [a["turn_id"] for a in ops.get("/api/approvals/")[1]["approvals"]] == [second]
    status, body, _ = ops.post(f"/api/approvals/{first}/answer", {"input_id": "approve-refund", "answer": True})
    assert status == 409 and body["error"]["code"] == "not_suspended"


def test_a_request_without_answerers_is_listed_to_its_owner_and_staff_only(alice):
    from agents_app.runtime.seams import TurnStatus

    session = m.Session.objects.create(agent="ops", key="free", owner=alice, generation=0)
    turn = m.Turn.objects.create(
        id="f" * 32,
        session=session,
        status=TurnStatus.SUSPENDED,
        input={"text": "x"},
        pending={
            "request": {"id": "q1", "prompt": "Which?", "schema": {"type": "string"}},
            "call": {"name": "ask", "input": {}},
        },
    )
    owner = Api(token_for(alice))
    other = Api(token_for(make_user("mallory")))
    staff_user = make_user("sam")
    staff_user.is_staff = True
    staff_user.save()
    staff = Api(token_for(staff_user))
    assert [a["turn_id"] for a in owner.get("/api/approvals/")[1]["approvals"]] == [turn.pk]
    assert [a["turn_id"] for a in staff.get("/api/approvals/")[1]["approvals"]] == [turn.pk]
    assert other.get("/api/approvals/")[1] == {"approvals": []}
    status, body, _ = other.post(f"/api/approvals/{turn.pk}/answer", {"input_id": "q1", "answer": "a"})
    assert status == 403 and not m.Answer.objects.exists()


def test_the_api_docs_page_renders_the_document_from_static_files():
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-spec="/api/openapi.json"' in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "//cdn" not in html and "https://" not in html
    assert Client().post("/api/docs/").status_code == 405


def test_the_document_describes_the_lists_and_the_approvals_api():
    import json

    doc = json.loads(Client().get("/api/openapi.json").content)
    assert doc["paths"]["/api/agents/{agent}/sessions/"]["get"]["operationId"] == "listSessions"
    turns = doc["paths"]["/api/agents/{agent}/sessions/{session}/turns"]
    assert set(turns) >= {"get", "post", "parameters"}
    assert doc["paths"]["/api/approvals/"]["get"]["operationId"] == "listApprovals"
    answer = doc["paths"]["/api/approvals/{turn_id}/answer"]["post"]
    assert set(answer["responses"]) >= {"200", "403", "409", "422", "500"}
    assert {"SessionSummary", "Approval", "Turn"} <= set(doc["components"]["schemas"])


def test_each_listed_session_has_a_url_that_answers_and_the_chats_title(api, alice):
    """Issue 40: the list's ``url`` answered 404, and its ``title`` was "" where the chat shows
    the first message's."""
    _queue(api, "titled", "Plan the spring catalogue")
    status, body, _ = api.get("/api/agents/ops/sessions/")
    assert status == 200
    [entry] = body["sessions"]
    assert entry["title"] == "Plan the spring catalogue"
    status, one, _ = api.get(entry["url"])
    assert status == 200 and one["session"] == "titled" and one["title"] == entry["title"]
    assert one["last_turn"]["status"] in ("queued", "running", "completed")
    bob = Api(token_for(make_user("bob")))
    assert bob.get(entry["url"])[0] == 403
    assert api.get("/api/agents/ops/sessions/nope/")[0] == 404


def test_the_home_page_does_not_offer_a_session_of_an_internal_agent(alice):
    """Issue 40: end users were offered "New session" on ``researcher``, which only ``ops``'s
    research tool starts (``listed = False`` in its agent.py)."""
    client = Client()
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert 'data-agent="ops"' in page and 'data-agent="researcher"' not in page


def test_the_home_page_tells_sessions_of_one_title_apart_and_shows_a_cancelled_last_turn(api, alice):
    """Issue 40: many sessions titled "essay" could not be told apart, and a session whose last
    turn was cancelled read "idle"."""
    first = _queue(api, "essay-a", "essay")
    _queue(api, "essay-b", "essay")
    _queue(api, "other", "order mugs")
    status, body, _ = api.post(f"{BASE}/essay-a/turns/{first}/cancel")
    assert status in (200, 202) and body["status"] == "cancelled", body
    m.Session.objects.filter(key="essay-a").update(status="idle")
    client = Client()
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert page.count('<span class="session-key hint" title="session key">essay-') == 2
    assert '<span class="session-key hint" title="session key">other' not in page
    row = page.split('data-key="essay-a"', 1)[1].split("</li>", 1)[0]
    assert '<span class="badge cancelled">cancelled</span>' in row
