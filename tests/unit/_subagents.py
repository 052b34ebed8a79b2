"""A parent agent that delegates and a researcher that answers, on scripted models (shared by
the subagent tests)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from agents_app.runtime import (
    Agent,
    FatalToolError,
    InMemorySessionStore,
    ModelError,
    ModelRequest,
    RecordingSink,
    Runtime,
    ScriptedModel,
    reply,
    tool,
)


def goal_of(request: ModelRequest) -> str:
    """The task a child was given (its first user message, marked as task data)."""
    first = next(m for m in request.messages if m.role == "user")
    found = re.search(r"<task>\n(.*)\n</task>", first.text, re.S)
    return found.group(1) if found else first.text


class Gates:
    """Children whose goal starts with ``hold`` wait here until the test opens the gate."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.held = 0


def build(
    *, gates: Gates | None = None, store: Any = None, dispatcher: Any = None, max_depth: int | None = None
) -> tuple[Runtime, Any, RecordingSink, dict[str, Any]]:
    seen: dict[str, Any] = {"delegate": 0, "children": []}

    @tool(
        "delegate",
        "hand topics to researchers",
        {
            "type": "object",
            "properties": {"topics": {"type": "array", "items": {"type": "string"}}, "mode": {"type": "string"}},
        },
    )
    async def delegate(input: dict[str, Any], ctx: Any) -> Any:
        seen["delegate"] += 1
        topics, mode = input["topics"], input.get("mode", "all")
        if mode == "one":
            result = await ctx.spawn("researcher", topics[0])
            return {"text": result["text"]}
        if mode == "named":  # a session the tool names: the specialist keeps its history
            result = await ctx.spawn("researcher", topics[0], key="desk")
            return {"text": result["text"]}
        if mode == "gather":
            results = await asyncio.gather(*(ctx.spawn("researcher", t) for t in topics))
        elif mode == "seq":
            results = [await ctx.spawn("researcher", t) for t in topics]
        else:
            results = await ctx.spawn_all([("researcher", t) for t in topics])
        return [{"status": r["status"], "text": r["text"], "error": r["error"]} for r in results]

    @tool("ask", "ask a person")
    async def ask(input: dict[str, Any], ctx: Any) -> Any:
        return {"answer": await ctx.request_input(id="ok", prompt="Go on?", schema={"type": "boolean"})}

    @tool("look", "look something up (a child that loops calls it forever)")
    def look(input: dict[str, Any], ctx: Any) -> Any:
        return {"found": "more to look up"}

    @tool("fatal", "spawns, then fails the turn")
    async def fatal(input: dict[str, Any], ctx: Any) -> Any:
        await ctx.spawn("researcher", "x")
        raise FatalToolError("cannot go on")

    def boss_script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "tool":
            return reply(f"summary: {last.result}", usage={"output_tokens": 7})
        text = last.text
        if text.startswith("fatal"):
            return reply("", ("fatal", {}))
        mode, _, rest = text.partition(" ")
        return reply(
            "delegating", ("delegate", {"topics": rest.split(" and "), "mode": mode}), usage={"output_tokens": 5}
        )

    def researcher_script(request: ModelRequest) -> Any:
        goal = goal_of(request)
        last = request.messages[-1]
        seen["children"].append(goal)
        if goal.startswith("loop"):  # a model that keeps calling a tool (ends at its limit)
            return reply("still looking", ("look", {}), usage={"output_tokens": 1})
        if last.role == "tool":
            return reply(f"{goal}: {last.result}", usage={"output_tokens": 2})
        if goal.startswith("fail"):
            return ModelError("the researcher broke", retryable=False)
        if goal.startswith("ask"):
            return reply("", ("ask", {}))
        if goal.startswith("deep"):
            return reply("", ("delegate", {"topics": [goal], "mode": "one"}))
        return reply(f"found {goal}", usage={"output_tokens": 3})

    class Researcher(ScriptedModel):
        async def stream(self, request: ModelRequest) -> Any:
            if gates is not None and goal_of(request).startswith("hold"):
                gates.held += 1
                await gates.open.wait()
            async for chunk in super().stream(request):
                yield chunk

    boss = Agent("boss", "You delegate.", tools=[delegate, fatal])
    researcher = Agent("researcher", "You research.", tools=[ask, delegate, look])
    models = {"boss": ScriptedModel(boss_script), "researcher": Researcher(researcher_script)}
    sink = RecordingSink()
    kw: dict[str, Any] = {}
    rt = Runtime(
        store=store or InMemorySessionStore(),
        agents={"boss": boss, "researcher": researcher},
        model_for=lambda a: models[a.name],
        sink=sink,
        dispatcher=dispatcher,
        **kw,
    )
    rt.executor.retry_delay = 0.0
    if max_depth is not None:
        rt.executor.max_depth = max_depth
    seen["models"] = models
    return rt, rt.store, sink, seen
