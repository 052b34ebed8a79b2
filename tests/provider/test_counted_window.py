"""The refusal of a message that cannot fit the model, counted by the API where a Claude model is
configured (``sessions_app.window``), against the local Messages API peer."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from agents_app.runtime.agent import Agent
from sessions_app import window, wiring

from .fake_messages_api import Counted, FakeMessagesAPI, HTTPError

WINDOW = 4096


@pytest.fixture
def api(monkeypatch):
    with FakeMessagesAPI() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        cache.clear()
        yield server


def agent(model: str = "anthropic") -> Agent:
    return Agent("clerk", "Be brief.", model=model, model_config={"context_window": WINDOW})


@pytest.fixture
def clerk(monkeypatch):
    definition = agent()
    monkeypatch.setattr(wiring, "agent", lambda name: definition)
    return definition


def test_text_the_estimate_lets_through_is_refused_by_the_count(api, clerk):
    """3,000 Japanese characters: 750 tokens by characters / 4, so the estimate let it through,
    and every step of the turn would overflow; the API counts 4,500 and the message is refused."""
    text = "日本語の文章です。" * 334
    assert len(text) <= window.room("clerk").chars  # what the estimate alone would accept
    api.script(Counted(4_500))
    with pytest.raises(window.ContextWindowExceeded, match="4,500 tokens"):
        window.check_fits("clerk", text)
    (got,) = api.requests
    assert got.path == "/v1/messages/count_tokens"
    assert got.body["system"] == "Be brief." and got.body["messages"][0]["content"] == text
    with pytest.raises(window.ContextWindowExceeded):
        window.check_fits("clerk", text)  # again: the cached count, no second request
    assert len(api.requests) == 1


def test_a_message_whose_bytes_fit_is_not_counted(api, clerk):
    window.check_fits("clerk", "order 2 mugs")
    assert api.requests == []


def test_a_count_that_fails_falls_back_to_the_estimate(api, clerk):
    api.script(HTTPError(529, "overloaded_error", "Overloaded"))
    window.check_fits("clerk", "a" * 5_000)  # 1,250 tokens by the estimate: accepted
    api.script(HTTPError(529, "overloaded_error", "Overloaded"))
    with pytest.raises(window.ContextWindowExceeded, match="characters"):
        window.check_fits("clerk", "b" * 17_000)  # 4,250 by the estimate: refused without a count
    assert len(api.requests) == 2


def test_a_counted_message_that_fits_is_accepted(api, clerk):
    api.script(Counted(3_000))
    window.check_fits("clerk", "日本語" * 1_500)


def test_the_demo_model_keeps_the_estimate(monkeypatch):
    definition = agent("demo")
    monkeypatch.setattr(wiring, "agent", lambda name: definition)
    assert window.count_tokens(definition, "x" * 20_000, WINDOW) is None
