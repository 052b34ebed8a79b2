"""The API's shapes declared once: the views read their input through the classes the document
is generated from, so a wrong type or an unknown field is a 400 that names the field (never a
500, never accepted), and what the document declares for a body is what the server takes."""

from __future__ import annotations

import json

import jsonschema
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sessions_app import models as m
from sessions_app.web.openapi import document

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/agents/ops/sessions/s1"


@pytest.fixture
def api():
    user = get_user_model().objects.create_user("shapes")
    token = m.ApiToken.issue(user, name="shapes")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(api, path: str, body) -> tuple[int, dict]:
    response = api.post(path, json.dumps(body), content_type="application/json")
    return response.status_code, response.json()


@pytest.mark.parametrize(
    "path, body, message",
    [
        (f"{BASE}/turns?wait=false", {"text": "hi", "colour": 1, "size": 2}, "unknown field(s): colour, size"),
        (f"{BASE}/turns?wait=false", {"text": 7}, "text must be a string"),
        (f"{BASE}/turns?wait=false", {"text": "hi", "replace": "true"}, "replace must be true or false"),
        (f"{BASE}/turns?wait=false", {"text": "hi", "attachments": "x"}, "attachments must be a list"),
        (f"{BASE}/turns?wait=false", {"text": "hi", "attachments": [1]}, "attachments.0 must be a string"),
        (f"{BASE}/turns?wait=maybe", {"text": "hi"}, "?wait= must be true or false"),
        (f"{BASE}/turns/t1/resume", {"input_id": "a"}, "answer is required"),
        (f"{BASE}/turns/t1/resume", {"input_id": "a\n", "answer": 1}, "input_id must match ^[A-Za-z0-9]"),
        (f"{BASE}/reset", {"x": 1}, "unknown field(s): x"),
        ("/api/agents/ops/chat", {"id": "c1", "messages": []}, "messages must have at least 1 item(s)"),
        (
            "/api/agents/ops/chat",
            {"id": "c1", "messages": [{}], "trigger": "x"},
            "trigger must be 'submit-message' or 'regenerate-message'",
        ),
    ],
)
def test_a_body_the_shape_refuses_is_a_400_naming_the_field(api, path, body, message):
    status, answer = post(api, path, body)
    assert status == 400 and answer["error"]["code"] == "bad_request", answer
    assert answer["error"]["message"].startswith(message), answer
    assert not m.Turn.objects.exists()


def test_a_query_the_shape_refuses_is_a_400_naming_the_parameter(api):
    assert post(api, f"{BASE}/turns?wait=false", {"text": "hi"})[0] == 202  # the session, for its export
    for path, message in [
        (f"{BASE}/events?limit=%D9%A3", "?limit= must be an integer"),
        (f"{BASE}/events?timeout=0", "?timeout= must be greater than 0"),
        (f"{BASE}/events?until=now", "?until= must be '' or 'terminal'"),
        ("/api/agents/ops/sessions/?limit=500", "?limit= must be greater than 0 and at most 200"),
        (f"{BASE}/export?format=pdf", "?format= must be 'json' or 'md'"),
    ]:
        response = api.get(path)
        assert response.status_code == 400, (path, response.content)
        assert response.json()["error"]["message"].startswith(message), (path, response.content)


def test_what_the_document_declares_for_a_start_the_server_takes(api):
    """The body schema of ``POST …/turns`` is the model the view validates through: a body the
    schema accepts starts a turn, one it refuses is a 400."""
    doc = document()
    schema = {**doc["components"]["schemas"]["StartTurn"], "components": doc["components"]}
    resolver = jsonschema.validators.RefResolver.from_schema(doc)
    good = {"text": "order mugs", "replace": False, "attachments": []}
    jsonschema.validate(good, schema, resolver=resolver)
    assert post(api, f"{BASE}/turns?wait=false", good)[0] == 202
    bad = {"text": "order mugs", "replace": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema, resolver=resolver)
    assert post(api, f"{BASE}/turns?wait=false", bad)[0] == 400
