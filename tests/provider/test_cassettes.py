"""Cassettes (june.testing.cassettes): a turn of the ``ops`` agent recorded through the
Anthropic provider against the local Messages API peer, replayed with the peer stopped and no
key set; a changed instruction fails the replay with a diff that names it; a key the model
echoes, and the one the provider sends, never reach the file."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from june.testing import Cassette, CassetteMismatch, JuneTester
from june.testing.cassettes import canonical, explain, key_of
from sessions_app import wiring
from tests.provider.fake_messages_api import FakeMessagesAPI, StreamBuilder

KEY = "sk-ant-test-0123456789-secret"
pytestmark = pytest.mark.django_db


def record(tmp_path, monkeypatch) -> tuple[JuneTester, list]:
    with FakeMessagesAPI() as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        monkeypatch.setattr(settings, "JUNE_MODEL", "")  # whatever the shell says
        api.script(
            StreamBuilder().tool_use("toolu_1", "lookup_stock", ['{"item"', ': "tea"}']).done("tool_use"),
            StreamBuilder().text("We have ", f"tea in stock (my key is {KEY}).").done(),
        )
        tester = JuneTester(cassettes=tmp_path, record=True, name="stock")
        turn = tester.run("ops", "how much tea?", model=tester.cassette())
        assert api.unscripted == 0
        bodies = api.bodies
    assert turn.status == "completed", turn.error
    assert turn.calls("lookup_stock")[0].input == {"item": "tea"}
    return turn, bodies


def replay(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    tester = JuneTester(cassettes=tmp_path, record=False, name="stock")
    return tester, tester.cassette()


def test_a_recorded_turn_replays_with_the_peer_stopped(tmp_path, monkeypatch):
    recorded, bodies = record(tmp_path, monkeypatch)
    assert len(bodies) == 2  # the real provider was asked twice while recording

    tester, cassette = replay(tmp_path, monkeypatch)
    turn = tester.run("ops", "how much tea?", model=cassette, session="again")

    assert turn.status == "completed"
    assert recorded.text == f"We have tea in stock (my key is {KEY})."  # the live reply
    assert turn.text == "We have tea in stock (my key is [redacted])."  # the file never held it
    assert [c.input for c in turn.tool_calls] == [c.input for c in recorded.tool_calls]
    assert turn.usage["input_tokens"] == recorded.usage["input_tokens"] > 0
    assert len(cassette.requests) == 2


def test_no_key_reaches_the_cassette(tmp_path, monkeypatch):
    record(tmp_path, monkeypatch)
    text = (tmp_path / "stock.json").read_text()
    assert KEY not in text and "[redacted]" in text
    assert "x-api-key" not in text.lower() and "127.0.0.1" not in text  # nothing of the transport
    entries = json.loads(text)["interactions"]
    assert [e["key"] for e in entries] == [key_of(e["request"]) for e in entries]


def test_a_changed_instruction_fails_with_a_diff_that_names_it(tmp_path, monkeypatch):
    record(tmp_path, monkeypatch)
    agent = wiring.agent("ops")
    monkeypatch.setattr(agent, "instructions", agent.instructions.rstrip() + "\nAlways answer in French.")

    tester, cassette = replay(tmp_path, monkeypatch)
    with pytest.raises(AssertionError) as failed:
        tester.run("ops", "how much tea?", model=cassette, session="again")

    message = str(failed.value)
    assert "instructions changed:" in message
    assert "  @@ -3 +3,2 @@\n   will try next.\n  +Always answer in French." in message  # as docs/testing.md shows
    assert "tool" not in message.split("instructions changed:")[0]  # nothing else is blamed
    assert "messages" not in message


def test_the_diff_names_tools_and_messages():
    from agents_app.runtime import Message, ModelRequest, Role, ToolSpec

    def req(text: str, tools: tuple) -> dict:
        return canonical(ModelRequest("sys", (Message(Role.USER, text=text),), tools), {"provider": "demo"})

    a = ToolSpec("a", "first", {"type": "object"})
    diff = explain(req("hi", (a,)), req("hello", (ToolSpec("a", "changed", {"type": "object"}), ToolSpec("b", "", {}))))
    assert "tool added: b" in diff
    assert "tool a changed:" in diff and '+ "description": "changed"' in diff.replace("  +", "+")
    assert "message 0 (user) changed:" in diff and '"text": "hello"' in diff


def test_a_missing_cassette_says_how_to_record_it(tmp_path):
    tester = JuneTester(cassettes=tmp_path, record=False, name="nothing")
    with pytest.raises(AssertionError, match="--june-record"):
        tester.run("ops", "hi", model=tester.cassette())
    assert isinstance(Cassette(tmp_path / "x.json")._miss({}), CassetteMismatch)
