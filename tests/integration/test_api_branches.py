"""Edit and regenerate over the HTTP API: a fork at a message, regenerate, list and switch
branches, and every refusal (busy 409, not a fork point 422, another user's 403, unknown 404).
Turns run on the real q2 task on an inline worker (``test_api.inline_worker``)."""

from __future__ import annotations

import pytest

from sessions_app import models as m
from sessions_app import selectors
from sessions_app.web.openapi import document
from tests.integration.test_api import BASE, Api, alice, api, inline_worker, make_user, token_for  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def texts(generation: int, key: str = "s1") -> list[tuple[str, str]]:
    rows = m.Message.objects.filter(session__key=key, generation=generation).order_by("index")
    return [(row.role, (row.data or {}).get("text", "")) for row in rows]


def two_turns(api) -> list[str]:
    ids = []
    for text in ("hello", "how are you"):
        status, body, _ = api.post(f"{BASE}/s1/turns", {"text": text})
        assert status == 200 and body["status"] == "completed", body
        ids.append(body["turn_id"])
    return ids


def test_an_edit_forks_a_live_branch_and_the_first_stays_to_switch_back_to(inline_worker, api):
    first, second = two_turns(api)
    status, listing, _ = api.get(f"{BASE}/s1/branches")
    assert status == 200 and listing["generation"] == 0 and listing["branches"] == []
    at = [o["index"] for o in listing["openings"] if o["turn_id"] == second][0]
    assert [o["alternatives"] for o in listing["openings"]] == [[0], [0]]
    before = texts(0)
    status, body, response = api.post(f"{BASE}/s1/messages/{at}/fork", {"text": "how old are you"})
    assert status == 202, body
    assert body["generation"] == 1 and response["Location"].endswith(body["turn_id"])
    turn = m.Turn.objects.get(pk=body["turn_id"])
    assert turn.status == "completed" and turn.generation == 1 and turn.source == "http"
    assert texts(1)[:at] == before[:at] and texts(1)[at] == ("user", "how old are you")
    assert texts(0) == before  # nothing of the first branch is lost
    _, listing, _ = api.get(f"{BASE}/s1/branches")
    point = [o for o in listing["openings"] if o["index"] == at][0]
    assert listing["generation"] == 1 and point["alternatives"] == [0, 1] and point["current"] == 1
    assert [(b["generation"], b["parent"], b["fork_index"]) for b in listing["branches"]] == [(0, None, 0), (1, 0, at)]
    status, body, _ = api.post(f"{BASE}/s1/branches/0/switch")
    assert status == 200 and body == {"generation": 0}
    assert m.Session.objects.get(key="s1").generation == 0
    # a turn now runs on the first branch and sees it (its messages land there)
    status, body, _ = api.post(f"{BASE}/s1/turns", {"text": "thanks"})
    assert status == 200 and m.Turn.objects.get(pk=body["turn_id"]).generation == 0
    assert texts(0)[: len(before)] == before and texts(0)[len(before)] == ("user", "thanks")
    assert selectors.archived_generations(session=m.Session.objects.get(key="s1")) == []  # a branch is no archive


def test_regenerate_sends_the_last_message_again_on_a_new_branch(inline_worker, api):
    first, second = two_turns(api)
    status, body, _ = api.post(f"{BASE}/s1/turns/{first}/regenerate")
    assert status == 409 and body["error"]["code"] == "conflict"
    status, body, _ = api.post(f"{BASE}/s1/turns/{second}/regenerate")
    assert status == 202 and body["generation"] == 1, body
    again = m.Turn.objects.get(pk=body["turn_id"])
    assert again.input["text"] == "how are you" and again.status == "completed"
    assert again.source == "http" and again.input["user"] == m.Turn.objects.get(pk=second).input["user"]
    assert texts(1)[:2] == texts(0)[:2] and texts(1)[2] == ("user", "how are you")
    # a reset archives the live branch only, under a number no branch had
    status, body, _ = api.post(f"{BASE}/s1/reset")
    assert body == {"previous_session": "s1#g1", "generation": 2}
    archived = selectors.archived_generations(session=m.Session.objects.get(key="s1"))
    assert [g["generation"] for g in archived] == [1]


def test_a_busy_session_refuses_forks_and_switches_with_409(inline_worker, api, settings):
    first, second = two_turns(api)
    api.post(f"{BASE}/s1/messages/0/fork", {"text": "hi"})  # a branch to switch back from
    m.Turn.objects.filter(pk=second).update(status="running")  # as a worker holds it
    for path, body in (
        (f"{BASE}/s1/messages/0/fork", {"text": "edit"}),
        (f"{BASE}/s1/branches/0/switch", None),
        (f"{BASE}/s1/turns/{second}/regenerate", None),
    ):
        status, answer, _ = api.post(path, body)
        assert status == 409 and answer["error"]["code"] == "session_busy", (path, answer)
    assert m.Session.objects.get(key="s1").generation == 1
    assert m.Turn.objects.filter(session__key="s1").count() == 3  # nothing was queued


def test_refusals(inline_worker, api):
    two_turns(api)
    bob = Api(token_for(make_user("bob")))
    assert bob.post(f"{BASE}/s1/messages/0/fork", {"text": "x"})[0] == 403
    assert bob.get(f"{BASE}/s1/branches")[0] == 403
    assert bob.post(f"{BASE}/s1/branches/0/switch")[0] == 403
    assert api.post(f"{BASE}/nope/messages/0/fork", {"text": "x"})[0] == 404
    for index, code in (("1", 422), ("99", 422), ("abc", 404), ("99999999999", 404)):
        status, body, _ = api.post(f"{BASE}/s1/messages/{index}/fork", {"text": "x"})
        assert status == code, (index, body)
    assert api.post(f"{BASE}/s1/messages/0/fork", {"text": ""})[0] == 400
    assert api.post(f"{BASE}/s1/messages/0/fork", {"text": "x", "extra": 1})[0] == 400
    assert api.post(f"{BASE}/s1/branches/7/switch")[0] == 404
    assert api.post(f"{BASE}/s1/turns/{'f' * 32}/regenerate")[0] == 404
    assert Api(None).post(f"{BASE}/s1/messages/0/fork", {"text": "x"})[0] == 401


def test_the_openapi_document_describes_the_branch_routes():
    paths = document()["paths"]
    assert {
        "/api/agents/{agent}/sessions/{session}/messages/{index}/fork",
        "/api/agents/{agent}/sessions/{session}/turns/{turn_id}/regenerate",
        "/api/agents/{agent}/sessions/{session}/branches",
        "/api/agents/{agent}/sessions/{session}/branches/{generation}/switch",
    } <= set(paths)
