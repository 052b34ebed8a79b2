"""MCP servers as tool sources (agents_app/mcp), against real servers the tests start: stdio
subprocesses and a streamable-HTTP server, written with the ``mcp`` package's server API."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents_app.mcp import McpSource, parse_servers
from agents_app.mcp import source as mcp_source
from agents_app.mcp.tool_results import McpToolError
from agents_app.runtime.errors import AgentConfigError

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
PROBE = str(SERVERS / "probe_server.py")
INVENTORY = str(Path(__file__).resolve().parents[2] / "agents_app" / "agents" / "ops" / "inventory_server.py")


def stdio(**entry) -> McpSource:
    [config] = parse_servers("t", [{"name": "probe", "command": [sys.executable, PROBE], **entry}])
    return McpSource(config)


async def names(source: McpSource) -> tuple[set[str], set[str]]:
    known, offered = await source.tools()
    return set(known), set(offered)


async def call(source: McpSource, name: str, args: dict, key: str = "k-1"):
    known, _ = await source.tools()
    return await source.call(known[name].spec.name.split("__", 1)[1], args, key)


async def test_tools_are_listed_under_the_servers_prefix_with_allow_and_deny():
    source = stdio()
    try:
        known, offered = await names(source)
        assert {"probe__echo", "probe__point", "probe__fail", "probe__slow", "probe__meta"} <= offered
        assert known == offered
        spec = (await source.tools())[0]["probe__point"].spec
        assert spec.input_schema["properties"].keys() == {"x", "y"} and "[probe]" in spec.description
    finally:
        await source.aclose()
    allowed = stdio(allow=["echo", "point"], deny=["point"])
    try:
        assert (await names(allowed))[1] == {"probe__echo"}
    finally:
        await allowed.aclose()


async def test_calls_give_text_structured_and_model_readable_errors():
    source = stdio()
    try:
        assert await call(source, "probe__echo", {"text": "hi"}) == {"result": {"result": "echo: hi"}}
        assert (await call(source, "probe__point", {"x": 2, "y": 3}))["result"]["sum"] == 5
        with pytest.raises(McpToolError, match="refused: no"):
            await call(source, "probe__fail", {"reason": "no"})
        with pytest.raises(McpToolError):  # arguments the server's schema refuses
            await call(source, "probe__point", {"x": "two"})
    finally:
        await source.aclose()


async def test_the_idempotency_key_and_secrets_from_the_environment_reach_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_PROBE_SECRET", "s3cret")
    calls = tmp_path / "calls"
    source = stdio(env={"PROBE_SECRET": "${MY_PROBE_SECRET}", "PROBE_CALLS": str(calls)})
    try:
        first = await call(source, "probe__meta", {}, key="turn-1:call-7")
        again = await call(source, "probe__meta", {}, key="turn-1:call-7")
    finally:
        await source.aclose()
    assert first["result"] == again["result"] == {"key": "turn-1:call-7", "secret": "s3cret"}
    assert calls.read_text().split() == ["turn-1:call-7", "turn-1:call-7"]  # twice, one key: dedupable


async def test_a_server_killed_mid_call_is_an_error_result_and_the_next_call_reconnects():
    source = stdio()
    try:
        with pytest.raises(McpToolError, match="probe"):
            await call(source, "probe__die", {})
        assert await call(source, "probe__echo", {"text": "back"}) == {"result": {"result": "echo: back"}}
    finally:
        await source.aclose()


@pytest.mark.slow
async def test_a_server_that_never_answers_times_out_and_the_loop_stays_free():
    # 5 s: the call after the timeout starts a new server process, which must be up within it
    # (1.5 s was too short for a Python process's start on a loaded machine; 2.8 s was seen)
    source = stdio(timeout=5)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    beat = asyncio.create_task(ticker())
    try:
        await source.tools()
        started = time.monotonic()
        with pytest.raises(McpToolError, match="did not answer within 5 s"):
            await call(source, "probe__slow", {"seconds": 8})  # blocks that server process
        took = time.monotonic() - started
        assert 4.9 <= took < 8, took
        assert ticks >= took / 0.05 * 0.5  # the loop kept running other work meanwhile
        assert await call(source, "probe__echo", {"text": "after"}) == {"result": {"result": "echo: after"}}
    finally:
        beat.cancel()
        await source.aclose()


async def test_a_server_that_is_down_offers_nothing_and_its_calls_are_errors():
    [config] = parse_servers(
        "t", [{"name": "gone", "command": [sys.executable, "-c", "import sys; sys.exit(1)"], "timeout": 3}]
    )
    source = McpSource(config)
    try:
        known, offered = await source.tools()
        assert known == {} and offered == frozenset()
        with pytest.raises(McpToolError):
            await source.call("anything", {}, "k")
    finally:
        await source.aclose()


async def test_a_changed_list_offers_the_new_tool_and_keeps_a_removed_one_callable(tmp_path, settings):
    marker = tmp_path / "extra"
    settings.JUNE_MCP_TOOLS_TTL = 0.0
    source = stdio(env={"PROBE_EXTRA": str(marker)}, deny=[])
    try:
        assert "probe__extra" not in (await names(source))[1]
        marker.write_text("1")
        source._drop()  # a new server process (lists read at its start): the list changed
        known, offered = await names(source)
        assert "probe__extra" in offered
        marker.unlink()
        source._drop()
        known, offered = await names(source)
        assert "probe__extra" not in offered and "probe__extra" in known  # a replay still finds it
    finally:
        await source.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, PROBE, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.kill()
    proc.wait()


async def test_streamable_http_lists_and_calls(http_server, monkeypatch):
    monkeypatch.setenv("PROBE_TOKEN", "t0k")
    [config] = parse_servers(
        "t", [{"name": "crm", "url": http_server, "headers": {"Authorization": "Bearer ${PROBE_TOKEN}"}}]
    )
    source = McpSource(config)
    try:
        known, offered = await source.tools()
        assert "crm__echo" in offered
        assert await source.call("echo", {"text": "over http"}, "k") == {"result": {"result": "echo: over http"}}
        with pytest.raises(McpToolError, match="refused"):
            await source.call("fail", {"reason": "x"}, "k")
    finally:
        await source.aclose()


def _with_headers(url: str, timeout: float) -> McpSource:
    [config] = parse_servers(
        "t",
        [{"name": "crm", "url": url, "headers": {"Authorization": "Bearer ${PROBE_TOKEN}"}, "timeout": timeout}],
    )
    return McpSource(config)


@pytest.mark.slow
async def test_an_http_server_with_headers_gets_the_declared_timeout_not_httpxs_5_s(http_server, monkeypatch):
    """With ``headers`` the transport built its own HTTP client with httpx's default 5 s timeout:
    every call over 5 s failed ("Connection closed") whatever the declared ``timeout``. A 9 s
    tool under a 30 s timeout answers; one over its declared timeout is an error result."""
    monkeypatch.setenv("PROBE_TOKEN", "t0k")
    source = _with_headers(http_server, 30)
    try:
        assert await source.call("auth", {}, "k") == {"result": {"authorization": "Bearer t0k"}}
        started = time.monotonic()
        assert await source.call("slow", {"seconds": 9}, "k") == {"result": {"result": "woke"}}
        assert time.monotonic() - started >= 9
    finally:
        await source.aclose()
    short = _with_headers(http_server, 3)
    try:
        started = time.monotonic()
        with pytest.raises(McpToolError, match="did not answer within 3 s"):
            await short.call("slow", {"seconds": 6}, "k")
        assert time.monotonic() - started < 6
    finally:
        await short.aclose()


def inventory(path: Path) -> McpSource:
    [config] = parse_servers("ops", [{"name": "inventory", "command": [sys.executable, INVENTORY, str(path)]}])
    return McpSource(config)


async def test_the_demo_inventory_dedupes_a_retried_reservation(tmp_path):
    source = inventory(tmp_path / "inventory.sqlite3")
    try:
        first = await source.call("reserve", {"item": "tea", "quantity": 3}, "turn-9:call-1")
        retried = await source.call("reserve", {"item": "tea", "quantity": 3}, "turn-9:call-1")
        other = await source.call("reserve", {"item": "tea", "quantity": 3}, "turn-9:call-2")
        with pytest.raises(McpToolError, match="cannot reserve 300 tea: 34 in stock"):
            await source.call("reserve", {"item": "tea", "quantity": 300}, "turn-9:call-3")
    finally:
        await source.aclose()
    assert first["result"]["left"] == 37 and retried["result"] == {**first["result"], "deduplicated": True}
    assert other["result"]["left"] == 34


async def test_the_demo_inventorys_dedupe_outlives_its_server_process(tmp_path):
    """The demo deduped in a dict of its process: a call retried after a worker's crash reaches a
    new server process with empty memory, which reserved again. Its file remembers the key."""
    path = tmp_path / "inventory.sqlite3"
    first = inventory(path)
    try:
        made = await first.call("reserve", {"item": "mugs", "quantity": 2}, "turn-4:call-1")
    finally:
        await first.aclose()
    second = inventory(path)  # another server process: the first one's memory is gone
    try:
        retried = await second.call("reserve", {"item": "mugs", "quantity": 2}, "turn-4:call-1")
        left = await second.call("count", {"item": "mugs"}, "turn-4:call-2")
    finally:
        await second.aclose()
    assert made["result"] == {"item": "mugs", "reserved": 2, "left": 10}
    assert retried["result"] == {**made["result"], "deduplicated": True}
    assert left["result"]["in_stock"] == 10


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"name": "Bad Name", "command": ["x"]}, "name must match"),
        ({"name": "a", "command": ["x"], "url": "http://x"}, "exactly one of"),
        ({"name": "a"}, "exactly one of"),
        ({"name": "a", "url": "ftp://x"}, "http"),
        ({"name": "a", "command": "python"}, "non-empty list"),
        ({"name": "a", "command": ["x"], "timeout": 0}, "timeout"),
        ({"name": "a", "command": ["x"], "env": {"K": 1}}, "map strings"),
        ({"name": "a", "command": ["x"], "secret": "no"}, "unknown keys"),
    ],
)
def test_a_bad_declaration_fails_the_agents_load(entry, message):
    with pytest.raises(AgentConfigError, match=message):
        parse_servers("t", [entry])


@pytest.mark.slow
def test_a_turn_of_the_ops_agent_calls_the_demo_mcp_server(tmp_path):
    """Through June's own command line: the ops agent with its MCP server on, the demo model
    asking for inventory__count; the turn completes with the server's structured answer."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_", "DATABASE_URL", "REDIS_URL"))}
    env.update(
        JUNE_VAR_DIR=str(tmp_path),
        JUNE_DEMO_MCP="1",
        JUNE_EMBEDDED="1",
        JUNE_DEMO_DELAY="0",
        DJANGO_SETTINGS_MODULE="june_project.settings",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env, check=True, timeout=300)
    out = subprocess.run(
        [sys.executable, "manage.py", "june", "chat", "ops", "s1", "count mugs", "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"in_stock": 12' in out.stdout and '"inventory__count"' in out.stdout
    assert "turn.completed" in out.stdout


async def test_an_mcp_tool_declared_in_the_entry_needs_approval():
    source = stdio(approval={"echo": {"prompt": "Echo it?"}, "*": None})
    try:
        known, _ = await source.tools()
        assert known["probe__echo"].approval == {"prompt": "Echo it?"}
        assert known["probe__point"].approval is None
    finally:
        await source.aclose()


async def test_the_servers_list_changed_notification_refreshes_the_list_before_the_ttl(settings):
    settings.JUNE_MCP_TOOLS_TTL = 3600.0
    source = stdio()
    try:
        known, offered = await names(source)
        assert "probe__later" not in offered
        assert await call(source, "probe__grow", {})  # the server adds `later` and notifies
        deadline = time.monotonic() + 10
        while source.listed_at and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert source.listed_at == 0.0, "the list-changed notification did not reach the source"
        known, offered = await names(source)
        assert "probe__later" in offered
        assert await call(source, "probe__later", {}) is not None
    finally:
        await source.aclose()


@pytest.mark.parametrize("name", ["crm__x", "crm_", "a__b__c"])
def test_a_server_name_with_the_separator_is_refused_at_load(name):
    """``__`` separates the server from its tool (``crm__find``): a server named ``crm__x`` was
    accepted, and ``crm__x__find`` read as server ``crm``, tool ``x__find``."""
    with pytest.raises(AgentConfigError, match=r"must not contain '__' nor end with '_'"):
        parse_servers("t", [{"name": name, "command": ["x"]}])


@pytest.mark.parametrize(
    "entry, named",
    [({"approval": {"ecoh": {"prompt": "Echo it?"}}}, "approval names .*'ecoh'"), ({"deny": ["fial"]}, "deny names")],
)
async def test_a_misspelled_approval_or_deny_withholds_the_servers_tools(entry, named, caplog):
    """A misspelled tool under ``approval`` was accepted silently, so the tool it meant (``echo``)
    ran without approval. Now none of the server's tools is offered or callable (which one the
    typo meant is unknown), the turn goes on without them, and the log says why."""
    from agents_app.runtime.agent import Agent

    source = stdio(**entry)
    try:
        tools, specs = await Agent(name="t", sources=[source]).tools_for_turn(None)
        assert not [n for n in tools if n.startswith("probe__")] and not specs
        assert re.search(named, source.problem) and "withheld" in source.problem
        assert any(r.levelname == "ERROR" and "withheld" in r.getMessage() for r in caplog.records)
    finally:
        await source.aclose()
    fixed = stdio(approval={"echo": {"prompt": "Echo it?"}}, deny=["fail"])
    try:
        known, offered = await names(fixed)
        assert "probe__echo" in offered and "probe__fail" not in offered and fixed.problem == ""
    finally:
        await fixed.aclose()


@pytest.mark.django_db(transaction=True)
def test_june_health_mcp_says_why_a_servers_tools_are_withheld(monkeypatch):
    """The operator sees it: ``manage.py june health --mcp`` lists each agent's MCP servers,
    says why one's tools are withheld, and exits 3."""
    from django.core.management import call_command

    from agents_app.runtime.agent import Agent
    from sessions_app import wiring

    agents = {
        "ok": Agent(name="ok", sources=[stdio()]),
        "typo": Agent(name="typo", sources=[stdio(approval={"ecoh": {"prompt": "?"}})]),
    }
    monkeypatch.setattr(wiring, "agents", lambda: agents)
    out = io.StringIO()  # not capsys: a stdio server's stderr needs a real file
    with pytest.raises(SystemExit) as exited:
        call_command("june", "health", "--mcp", "--json", stdout=out)
    assert exited.value.code == 3
    report = json.loads(out.getvalue())
    assert report["status"] == "ok" and report["mcp"]["ok/probe"] == "ok"
    assert "approval names tools the server does not offer: ['ecoh']" in report["mcp"]["typo/probe"]
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("june", "health", "--mcp", stdout=out)
    assert "typo/probe" in out.getvalue() and "withheld" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_admin_says_why_a_servers_tools_are_withheld(monkeypatch):
    """The same in the admin: the dashboard links "MCP servers", whose page lists each agent's
    servers, ok or why not (a misspelled approval: its tools withheld); Check again connects
    anew; only staff see it."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from agents_app.runtime.agent import Agent
    from sessions_app import wiring
    from sessions_app.admin import mcp_admin

    agents = {
        "ok": Agent(name="ok", sources=[stdio()]),
        "typo": Agent(name="typo", sources=[stdio(approval={"ecoh": {"prompt": "?"}})]),
    }
    monkeypatch.setattr(wiring, "agents", lambda: agents)
    monkeypatch.setattr(mcp_admin, "_last", {"at": None, "found": {}})
    make = get_user_model().objects.create_user
    staff, user = Client(), Client()
    staff.force_login(make("sam", password="pw-sam-123", is_staff=True))
    user.force_login(make("alice", password="pw-alice-123"))
    page = reverse("admin:sessions_app_approvalrequest_mcp")
    dashboard = staff.get(reverse("admin:sessions_app_approvalrequest_dashboard")).content.decode()
    assert f'id="june-mcp-link" href="{page}"' in dashboard

    html = staff.get(page).content.decode()
    rows = dict(re.findall(r"<tr class=\"(?:ok|bad)\"><td>(.*?)</td><td>(.*?)</td></tr>", html))
    assert rows["ok/probe"] == "ok", rows
    assert "tools withheld" in rows["typo/probe"] and "[&#x27;ecoh&#x27;]" in rows["typo/probe"], rows
    assert "2 servers, 1 not ok." in html
    agents["typo"] = Agent(name="typo", sources=[stdio(approval={"echo": {"prompt": "?"}})])  # the entry fixed
    assert "1 not ok" in staff.get(page).content.decode()  # a reload within the minute: as found
    assert "2 servers, 0 not ok." in staff.post(page).content.decode()  # Check again
    assert user.get(page).status_code == 302  # to the admin's login
