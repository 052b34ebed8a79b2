"""One MCP server per process: connected lazily on the event loop that first needs it (a worker's
runner loop drives every turn of its process), shared by every turn on that loop, reconnected
after a failure. Its tool list is fetched on the first turn and again after ``tools_ttl``; a tool
it stops offering stays callable in this process (a turn that replays a call made before the
change finds it). Every call and listing has a timeout: a server that hangs gives an error
result, and holds neither the turn nor the worker."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import time
import weakref
from typing import Any

from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.model import ToolSpec
from agents_app.runtime.tools import Tool

from .declarations import SEPARATOR, ServerConfig, parse_servers
from .tool_results import McpToolError, tool_result

log = logging.getLogger(__name__)
MAX_DESCRIPTION = 2_000
#: the longest a turn's start waits for a server's tool list
LIST_TIMEOUT = 10.0
#: an HTTP server's connect/write/pool and read timeouts (the SDK's own client's)
HTTP_TIMEOUT, HTTP_READ_TIMEOUT = 30.0, 300.0
#: the key the call's idempotency key travels under in the request's ``_meta``
IDEMPOTENCY_META = "june/idempotency_key"


def _sdk() -> tuple[Any, Any]:
    from mcp import Client, StdioServerParameters

    return Client, StdioServerParameters


def _http_client_factory() -> Any:
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client


def warm(agents: Any) -> bool:
    """Import the MCP SDK now if one of ``agents`` has an MCP server (a worker calls it before
    its cluster forks, as ``providers.warm``: each worker then shares it instead of importing it
    on its first call). Whether it did."""
    if not any(isinstance(source, McpSource) for agent in agents for source in agent.sources):
        return False
    _sdk()
    _http_client_factory()
    return True


class _Connection:
    """A client session held open by a task of its own (the SDK's context must be entered and
    left by one task); calls from any task of the loop go through it."""

    def __init__(self, config: ServerConfig, on_tools_changed: Any = None) -> None:
        self.config = config
        self.on_tools_changed = on_tools_changed
        self.client: Any = None
        self.ready = asyncio.Event()
        self.failed: BaseException | None = None
        self._stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._hold(), name=f"mcp-{config.name}")

    async def _hold(self) -> None:
        # the SDK's import takes a second or more on a busy machine: off the loop, whose every
        # turn (and lease heartbeat) would wait for it (a worker imports it before forking: ``warm``)
        Client, StdioServerParameters = await asyncio.to_thread(_sdk)  # noqa: N806 (classes)
        config = self.config
        try:
            async with contextlib.AsyncExitStack() as stack:
                if config.command:
                    target: Any = StdioServerParameters(
                        command=config.command[0],
                        args=list(config.command[1:]),
                        env=config.resolved_env() or None,
                        cwd=config.cwd,
                    )
                else:
                    target = await _http_transport(config, stack)
                client = await stack.enter_async_context(
                    Client(target, read_timeout_seconds=config.timeout, message_handler=self._on_message)
                )
                self.client = client
                self.ready.set()
                listener = asyncio.get_running_loop().create_task(self._listen(client))
                try:
                    await self._stop.wait()
                finally:
                    listener.cancel()
        except asyncio.CancelledError:  # closed: dropped after a failure, or its loop is ending
            raise
        except BaseException as exc:  # noqa: BLE001 (a dead server is the calls' error, not the loop's)
            self.failed = exc
            log.warning("MCP server %s: connection ended: %s: %s", config.name, type(exc).__name__, exc)
        finally:
            self.client = None
            self.ready.set()

    async def _listen(self, client: Any) -> None:
        """Protocol 2026-07-28: list changes come on a ``subscriptions/listen`` stream (older
        servers send the notification to ``_on_message``; the TTL covers a server sending none)."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    if self.on_tools_changed is not None:
                        self.on_tools_changed()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (not offered, or the stream dropped: the TTL remains)
            log.info("MCP server %s: no list-changed stream: %s: %s", self.config.name, type(exc).__name__, exc)

    async def _on_message(self, message: Any) -> None:
        """The server's ``notifications/tools/list_changed``: the next turn fetches the list again."""
        if _is_tools_changed(message) and self.on_tools_changed is not None:
            self.on_tools_changed()
        await asyncio.sleep(0)

    @property
    def alive(self) -> bool:
        return not self.task.done()

    async def session(self) -> Any:
        await asyncio.wait_for(self.ready.wait(), self.config.timeout)
        if self.client is None:
            raise McpToolError(f"MCP server {self.config.name!r} is not reachable: {self.failed}")
        return self.client

    def close(self) -> None:
        self._stop.set()


TOOLS_CHANGED = "notifications/tools/list_changed"


def _is_tools_changed(message: Any) -> bool:
    for part in (message, getattr(message, "root", None)):
        if getattr(part, "method", None) == TOOLS_CHANGED:
            return True
    return False


async def _http_transport(config: ServerConfig, stack: contextlib.AsyncExitStack) -> Any:
    """Streamable HTTP: the URL, or, with headers (secrets from the environment), a transport
    whose HTTP client sends them. That client gets the SDK's own client's timeouts (30 s; reads
    300 s), not httpx's 5 s default, which cut every call over 5 s: a read waits at least as
    long as the server's declared ``timeout`` (the call's own limit, ``McpSource.call``'s). The
    stack closes it (the transport leaves a client it was given open)."""
    headers = config.resolved_headers()
    if not headers:
        return config.url
    import httpx2

    streamable_http_client = await asyncio.to_thread(_http_client_factory)

    timeout = httpx2.Timeout(HTTP_TIMEOUT, read=max(HTTP_READ_TIMEOUT, config.timeout + 5.0))
    client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=timeout))
    return streamable_http_client(config.url, http_client=client)


class McpSource:
    """An agent's MCP server as a ``ToolSource`` (agents_app.runtime.agent)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Connection] = (
            weakref.WeakKeyDictionary()
        )
        self.known: dict[str, Tool] = {}
        self.offered: frozenset[str] = frozenset()
        self.listed_at = 0.0
        self._listing: asyncio.Lock | None = None
        #: what is wrong with the entry, found at the last listing ("" when nothing): its tools
        #: are withheld meanwhile (``status``, ``manage.py june health --mcp``)
        self.problem = ""

    # -- the ToolSource protocol ---------------------------------------------------------------

    async def tools(self) -> tuple[dict[str, Tool], frozenset[str]]:
        ttl = self.config.tools_ttl
        if time.monotonic() - self.listed_at >= ttl or not self.listed_at:
            try:
                await asyncio.wait_for(self.refresh(), min(LIST_TIMEOUT, self.config.timeout))
            except Exception as exc:  # noqa: BLE001 (the turn goes on with what it knew)
                log.warning("MCP server %s: tool list not fetched: %s", self.config.name, exc)
                self.listed_at = time.monotonic() - ttl + 5.0  # try again in 5 s, not every turn
        return self.known, self.offered

    def tools_changed(self) -> None:
        """The server said its list changed: the next ``tools()`` fetches it (before the TTL)."""
        self.listed_at = 0.0

    async def refresh(self) -> None:
        session = await self._session()
        listed = await session.list_tools()
        problem = self.config.misnamed({found.name for found in listed.tools})
        if problem:  # fail closed: which tool the typo meant is unknown, so none is offered
            log.error("%s", problem)
            self.problem = problem
            self.known, self.offered, self.listed_at = {}, frozenset(), time.monotonic()
            return
        self.problem = ""
        offered = set()
        for found in listed.tools:
            if not self.config.offers(found.name):
                continue
            name = f"{self.config.name}{SEPARATOR}{found.name}"
            offered.add(name)
            self.known[name] = self._tool(name, found)
        self.offered = frozenset(offered)
        self.listed_at = time.monotonic()

    # -- calls ---------------------------------------------------------------------------------------

    async def call(self, remote: str, arguments: dict[str, Any], idempotency_key: str) -> Any:
        try:
            session = await self._session()
            result = await asyncio.wait_for(
                session.call_tool(remote, arguments, meta={IDEMPOTENCY_META: idempotency_key}), self.config.timeout
            )
        except TimeoutError:
            self._drop()  # a hung server: the next call connects again
            raise McpToolError(
                f"MCP server {self.config.name!r} did not answer within {self.config.timeout:g} s"
            ) from None
        except McpToolError:
            self._drop()
            raise
        except Exception as exc:  # noqa: BLE001 (down, killed mid-call, a garbled answer)
            self._drop()
            raise McpToolError(f"MCP server {self.config.name!r} failed: {type(exc).__name__}: {exc}"[:2000]) from None
        return tool_result(result)

    def _tool(self, name: str, found: Any) -> Tool:
        remote = found.name
        schema = getattr(found, "input_schema", None) or {"type": "object", "properties": {}}
        description = getattr(found, "description", None) or f"{remote} (MCP server {self.config.name})"
        spec = ToolSpec(name, f"[{self.config.name}] {description}"[:MAX_DESCRIPTION], dict(schema))

        async def run(input: dict[str, Any], ctx: Any) -> Any:
            return await self.call(remote, input, ctx.idempotency_key)

        declared = self.config.approval.get(remote, self.config.approval.get("*"))
        return Tool(spec, run, approval=declared)

    async def _session(self) -> Any:
        loop = asyncio.get_running_loop()
        connection = self._connections.get(loop)
        if connection is None or not connection.alive:
            connection = self._connections[loop] = _Connection(self.config, self.tools_changed)
        return await connection.session()

    def _drop(self) -> None:
        try:
            connection = self._connections.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            return
        if connection is not None:
            connection.close()
            connection.task.cancel()

    async def aclose(self) -> None:
        self._drop()


async def status(agents: dict[str, Any]) -> dict[str, str]:
    """Every MCP server of the agents, by ``<agent>/<server>``: ``ok``, or why its tools are not
    offered (a misnamed entry, or not reachable). Connects to each (``manage.py june health
    --mcp``), then closes what it opened."""
    found: dict[str, str] = {}
    for name in sorted(agents):
        for source in getattr(agents[name], "sources", ()):
            if not isinstance(source, McpSource):
                continue
            key = f"{name}/{source.config.name}"
            try:
                # the server's whole ``timeout``, not a turn's 10 s: an operator's command can wait
                await asyncio.wait_for(source.refresh(), source.config.timeout)
                found[key] = source.problem or "ok"
            except Exception as exc:  # noqa: BLE001 (down or slow: said, not raised)
                found[key] = f"not reachable: {type(exc).__name__}: {exc}"[:500]
            finally:
                await source.aclose()
    return found


def sources_for(agent: str, entries: Any) -> list[McpSource]:
    """The agent's ``mcp`` declarations as tool sources (checked now: AgentConfigError, also
    when the ``mcp`` SDK, the ``[mcp]`` extra, is not installed)."""
    configs = parse_servers(agent, entries)
    if configs and importlib.util.find_spec("mcp") is None:
        raise AgentConfigError(
            f"agent {agent!r} declares MCP servers, and the MCP SDK is not installed: pip install 'june-django[mcp]'"
        )
    return [McpSource(config) for config in configs]
