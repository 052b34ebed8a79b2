"""The chat's addresses as people type them: trimmed, or without their trailing slash.

``/agents/ops`` and ``/agents/ops/sessions/`` were 404s: no page had those paths, and
APPEND_SLASH redirects only to a path that resolves. They lead to the home page's part for the
agent; a chat's address without its slash is redirected to the chat; the API is never redirected."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(client):
    user = get_user_model().objects.create_user("walker", password="x")
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", ["/agents/ops", "/agents/ops/", "/agents/ops/sessions", "/agents/ops/sessions/"])
def test_an_agents_address_leads_to_its_sessions(person, path):
    response = person.get(path, follow=True)
    assert response.status_code == 200, response.redirect_chain
    assert response.redirect_chain[-1][0] == "/#agent-ops"
    assert b'id="agent-ops"' in response.content


def test_a_chats_address_without_its_slash_is_redirected(person):
    response = person.get("/agents/ops/sessions/s1")
    assert response.status_code == 301 and response["Location"] == "/agents/ops/sessions/s1/"
    assert person.get("/agents/ops/sessions/s1/archive")["Location"] == "/agents/ops/sessions/s1/archive/"


def test_an_unknown_agent_is_still_a_404(person):
    assert person.get("/agents/nobody/").status_code == 404


def test_the_api_is_never_redirected(person):
    response = person.post("/api/agents/ops/sessions/s1/turns/", {"text": "hi"})
    assert response.status_code == 404 and response["Content-Type"].startswith("application/json")
    assert person.get("/api/agents/ops").status_code == 404
