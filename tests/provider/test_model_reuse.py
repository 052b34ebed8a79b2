"""An agent's Claude model is built once per event loop and handed to each of its turns
(``providers.model_for``): never across two agents, a changed definition, settings or
environment, another loop, or a registered factory's models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents_app import providers
from agents_app.providers import model_for
from agents_app.providers.anthropic import AnthropicModel
from agents_app.providers.fallback import FallbackModel
from agents_app.runtime import Runtime
from agents_app.runtime.agent import Agent
from agents_app.runtime.fakes import RecordingSink, ScriptedModel, reply
from agents_app.runtime.memory import InMemorySessionStore

from .fake_messages_api import FakeMessagesAPI, StreamBuilder


@pytest.fixture(autouse=True)
def key(monkeypatch, settings):
    settings.JUNE_MODEL = ""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


async def test_one_model_per_agent_for_all_its_turns_on_a_loop():
    a = Agent("a", model="anthropic", model_config={"max_tokens": 1024})
    first = model_for(a)
    assert isinstance(first, AnthropicModel) and model_for(a) is first
    # another agent with the same settings has its own
    b = Agent("b", model="anthropic", model_config={"max_tokens": 1024})
    assert model_for(b) is not first and model_for(b) is model_for(b)
    # the agent reloaded with the same definition: the same model, which is a function of it
    assert model_for(Agent("a", model="anthropic", model_config={"max_tokens": 1024})) is first


async def test_a_changed_definition_settings_or_environment_builds_a_new_model(monkeypatch, settings):
    a = Agent("a", model="anthropic", model_config={"max_tokens": 1024})
    first = model_for(a)
    a.model_config["max_tokens"] = 2048  # changed in place
    second = model_for(a)
    assert second is not first and second.max_tokens == 2048
    reloaded = Agent("a", model="anthropic:claude-opus-4-6", model_config={"max_tokens": 2048})
    third = model_for(reloaded)
    assert third is not second and third.model == "claude-opus-4-6"
    assert third.prompt_cache is not None and third.prompt_cache.min_tokens == 4096
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
    fourth = model_for(reloaded)
    assert fourth is not third and str(fourth._client.base_url).startswith("http://127.0.0.1:1")
    settings.JUNE_MODEL = "anthropic:claude-haiku-4-5"
    assert model_for(reloaded).model == "claude-haiku-4-5"
    settings.JUNE_MODEL = "demo"
    assert not isinstance(model_for(reloaded), AnthropicModel)


async def test_a_bad_setting_is_reported_at_every_turn():
    a = Agent("a", model="anthropic", model_config={"max_tokens": 0})
    for _ in range(2):
        with pytest.raises(Exception, match="max_tokens"):
            model_for(a)


async def test_a_fallback_list_is_kept_too():
    a = Agent(
        "a",
        model=("anthropic", "vertex"),
        model_config={"providers": {"vertex": {"region": "us-east5", "project_id": "p"}}},
    )
    built = model_for(a)
    assert isinstance(built, FallbackModel) and model_for(a) is built


def test_each_loop_and_no_loop_builds_its_own():
    """A model's client belongs to the loop it was built on: another loop (a test's, a
    command's ``asyncio.run``) builds its own, and so does a call outside any loop."""
    a = Agent("a", model="anthropic")

    async def twice() -> Any:
        found = model_for(a)
        assert model_for(a) is found
        return found

    assert asyncio.run(twice()) is not asyncio.run(twice())
    assert model_for(a) is not model_for(a)


async def test_a_registered_factory_is_called_for_every_turn():
    made: list[Any] = []

    def factory(agent: Agent) -> ScriptedModel:
        made.append(ScriptedModel([reply("hi")]))
        return made[-1]

    providers.register("reuse-test", factory)
    try:
        a = Agent("a", model="reuse-test")
        assert model_for(a) is not model_for(a) and len(made) == 2
    finally:
        providers.unregister("reuse-test")


async def test_turns_of_one_agent_share_its_model_and_each_gets_its_own_answer(monkeypatch):
    with FakeMessagesAPI() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        api.script(StreamBuilder().text("one").done(), StreamBuilder().text("two").done())
        built: list[Any] = []

        def counted(agent: Agent) -> Any:
            built.append(model_for(agent))
            return built[-1]

        agent = Agent("a", "be brief", model="anthropic")
        rt = Runtime(store=InMemorySessionStore(), agents={"a": agent}, model_for=counted, sink=RecordingSink())
        answers = []
        for n, text in enumerate(("first", "second")):
            session = rt.session("a", f"s{n}")
            answers.append((await session.result(await session.start(text), timeout=10)).text)
        assert answers == ["one", "two"]
        assert len(built) == 2 and built[0] is built[1]
        assert [r.body["messages"][-1]["content"][-1]["text"] for r in api.requests] == ["first", "second"]
