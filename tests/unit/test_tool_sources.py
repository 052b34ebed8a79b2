"""Tool sources (``Agent.sources``, the seam MCP servers plug into): merged into a turn's tools
at its start, less the policy's denied ones; a tool a source stops offering stays callable
(a replay finds it) but is not shown to the model."""

from agents_app.runtime.agent import Agent, surface
from agents_app.runtime.tools import tool


def _tool(name):
    @tool(name, f"{name} tool")
    async def run(input, ctx):
        return name

    return run


class Source:
    def __init__(self, known, offered):
        self.known = {n: _tool(n) for n in known}
        self.offered = frozenset(offered)
        self.asked = 0

    async def tools(self):
        self.asked += 1
        return self.known, self.offered


async def test_a_turns_tools_are_the_folders_and_its_sources():
    source = Source(["crm__find", "crm__old", "crm__drop"], ["crm__find", "crm__drop"])
    agent = Agent(
        name="a", tools=[_tool("local")], sources=[source], surfaces={"webhook": {"deny_tools": ["crm__drop"]}}
    )
    tools, specs = await agent.tools_for_turn(agent.policy_for("web"))
    assert set(tools) == {"local", "crm__find", "crm__old", "crm__drop"}
    assert [s.name for s in specs] == ["local", "crm__find", "crm__drop"]  # crm__old: callable, not shown
    tools, specs = await agent.tools_for_turn(agent.policy_for("webhook"))
    assert "crm__drop" not in tools and "crm__drop" not in [s.name for s in specs]
    assert source.asked == 2


async def test_a_folder_tool_is_not_replaced_by_a_sources_tool_of_the_same_name():
    mine = _tool("x__y")
    agent = Agent(name="a", tools=[mine], sources=[Source(["x__y"], ["x__y"])])
    tools, specs = await agent.tools_for_turn(None)
    assert tools["x__y"] is mine and len(specs) == 1


async def test_an_agent_without_sources_shows_its_folder():
    agent = Agent(name="a", tools=[_tool("t")], surfaces={"web": surface(deny_tools=["t"])})
    tools, specs = await agent.tools_for_turn(agent.policy_for("web"))
    assert tools == {} and specs == ()
