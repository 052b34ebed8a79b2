"""The Anthropic Messages API as a :class:`~agents_app.runtime.seams.Model`.

The ``anthropic`` SDK is imported by this module and its parts (``anthropic_*``, ``platforms``). One ``stream()`` call is one
streamed Messages API request (retried here, never by the SDK): text and thinking deltas are
yielded as they arrive, then exactly one :class:`ModelReply` whose ``blocks`` are the
assistant's content blocks as the API returned them (thinking signatures, redacted thinking
data, tool_use inputs), so the engine can store them and send them back unchanged.

The pieces are pure functions over plain data so they can be tested by table (the folding in
``anthropic_stream``):
``build_messages`` (transcript → API messages, in ``anthropic_request``), ``fold_event`` (one raw stream event into a
snapshot), ``reply_from`` (snapshot → ModelReply) and ``classify_error`` (SDK error → what to do, in
``anthropic_errors``).

Context overflow (the stop reason ``model_context_window_exceeded``, a 400 "prompt is too long",
a 413 ``request_too_large``) ends the stream with an empty ``CONTEXT_OVERFLOW`` reply: the engine
compacts and redoes the step. ``server_compaction`` turns on the API's own compaction
(``compact_20260112``, a beta): its ``compaction`` blocks are kept on the assistant message and
sent back verbatim, like signed thinking blocks.

Prompt caching is on by default: ``prompt_cache.place_breakpoints`` marks the system prompt, the
previous request's end and the last message with ``cache_control`` (when the prefix reaches the
model's minimum), so a conversation's history is read from the cache at 0.1x the input price.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx2

from agents_app import attachments
from agents_app.providers import ANTHROPIC_CONTEXT_WINDOW, anthropic_http, is_long_lived, platforms
from agents_app.providers.anthropic_errors import (  # noqa: F401 (classify_error: table-tested here)
    CAUGHT,
    Failure,
    classify_error,
    stream_error,
)
from agents_app.providers.anthropic_files import Reader
from agents_app.providers.anthropic_request import build_messages, tools_of
from agents_app.providers.anthropic_stream import (  # noqa: F401 (the provider's table-tested names)
    CACHE_WRITE_1H_KEY,
    USAGE_KEYS,
    Snapshot,
    fold_event,
    map_stop_reason,
    reply_from,
)
from agents_app.providers.prompt_cache import TTLS, PromptCache, min_cacheable_tokens, place_breakpoints
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.model import (
    ModelChunk,
    ModelError,
    ModelReply,
    ModelRequest,
    StopReason,
)

DEFAULT_MODEL = "claude-sonnet-4-6"  # claude-sonnet-4-5 is deprecated in this SDK
DEFAULT_MAX_TOKENS = 4096
DEFAULT_MAX_RETRIES = 4
#: the context window of the Claude models this provider defaults to (tokens)
DEFAULT_CONTEXT_WINDOW = ANTHROPIC_CONTEXT_WINDOW  # one number: the web checks messages against it
#: the beta that server-side compaction (``compact_20260112``) needs in this SDK
COMPACTION_BETA = "compact-2026-01-12"
#: a server asking us to wait longer than this is waited on for this long, then retried
MAX_RETRY_AFTER = 60.0
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 8.0

_SETTINGS_KEYS = frozenset(
    {
        "model",
        "max_tokens",
        "temperature",
        "thinking_budget",
        "max_retries",
        "context_window",
        "server_compaction",
        "prompt_cache",
        "cache_ttl",
        "cache_min_tokens",
    }
)
_SERVER_COMPACTION_KEYS = frozenset({"trigger", "instructions"})
_decoder = json.JSONDecoder()
_decode_json, _scan_json = _decoder.decode, _decoder.scan_once


# --- the model -------------------------------------------------------------------------------


class AnthropicModel:
    """One streamed Messages API call per model step.

    Transient failures (overloaded/529, 429, 5xx, connection errors and timeouts) are retried
    here with exponential backoff, honouring ``retry-after`` (capped at ``MAX_RETRY_AFTER``), up
    to ``max_retries`` times, but only while nothing has been yielded for the call: once a
    delta is out, a failure raises ``ModelError(retryable=True)`` and the engine redelivers the
    turn. Other API errors raise ``ModelError(retryable=False)``. A context-window overflow is
    not an error: it ends the stream with an empty ``ModelReply(stop_reason=CONTEXT_OVERFLOW)``.
    """

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float | None = None,
        thinking_budget: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        server_compaction: dict[str, Any] | None = None,
        prompt_cache: bool = True,
        cache_ttl: str = "5m",
        cache_min_tokens: int | None = None,
        timeout: float = 600.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        read_attachment: Reader | None = None,
        platform: str = "anthropic",
        place: dict[str, str] | None = None,
    ) -> None:
        platforms.check_place(platform, place or {})
        self.model = model
        #: where the model is reached (``platforms``), and who answered, as steps record it
        self.platform = platform
        self.served_by = f"{platform}:{model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.thinking_budget = thinking_budget
        self.max_retries = max_retries
        #: read by the engine's compactor (its threshold is a share of this)
        self.context_window = context_window
        #: ``{"trigger": tokens, "instructions": str}`` turns on the API's own compaction
        self.server_compaction = server_compaction
        #: where ``cache_control`` marks go (None: caching off)
        self.prompt_cache = (
            PromptCache(
                min_tokens=cache_min_tokens if cache_min_tokens is not None else min_cacheable_tokens(model),
                ttl=cache_ttl,
            )
            if prompt_cache
            else None
        )
        self._sleep = sleep
        #: an attachment's bytes by id (the site's storage; a test passes its own)
        self.read_attachment: Reader = read_attachment or attachments.read
        if platform == "anthropic":
            api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
            base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        try:
            loop_lives = is_long_lived(asyncio.get_running_loop())
        except RuntimeError:
            loop_lives = False
        self._client = platforms.client(
            platform, api_key=api_key, base_url=base_url, timeout=timeout, place=place, long_lived=loop_lives
        )

    def secrets(self) -> tuple[str, ...]:
        """The credentials this model sends (what a recording of its replies must never hold)."""
        found = (self._client.api_key, getattr(self._client, "auth_token", None))
        return tuple(s for s in found if isinstance(s, str) and s)

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request`` (without ``stream``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": build_messages(request.messages, self.read_attachment),
        }
        if request.system:
            params["system"] = request.system
        tools_chars = None
        if request.tools:
            params["tools"], tools_chars = tools_of(request.tools)
            if not request.tools_allowed:  # the turn's last call at its limit (runtime.limits)
                params["tool_choice"] = {"type": "none"}
        if self.thinking_budget:
            params["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if self.temperature is not None:
            # this SDK version has no ``temperature`` keyword; the API still accepts the field
            params["extra_body"] = {"temperature": self.temperature}
        if self.server_compaction is not None and request.purpose == "turn":
            edit: dict[str, Any] = {"type": "compact_20260112"}
            if self.server_compaction.get("trigger"):
                edit["trigger"] = {"type": "input_tokens", "value": int(self.server_compaction["trigger"])}
            if self.server_compaction.get("instructions"):
                edit["instructions"] = self.server_compaction["instructions"]
            params["betas"] = [COMPACTION_BETA]
            params["context_management"] = {"edits": [edit]}
        if self.prompt_cache is not None and request.purpose == "turn":
            # not a compaction's summarizing call: its one-off prefix would be written (1.25x)
            # and never read
            params = place_breakpoints(params, self.prompt_cache, tools=tools_chars)
        return params

    def backoff(self, attempt: int, failure: Failure) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        if failure.retry_after is not None:
            return min(max(failure.retry_after, 0.0), MAX_RETRY_AFTER)
        # jitter spreads the retries of many workers hit by the same overload
        return min(BACKOFF_INITIAL * 2**attempt, BACKOFF_MAX) * random.uniform(0.75, 1.0)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Yield deltas, then exactly one ModelReply; raise ModelError on failure."""
        if self.platform == "anthropic" and self._client.api_key is None and self._client.auth_token is None:
            # the SDK would raise a bare TypeError at request time; say what to do instead
            raise ModelError("no Anthropic API key: set ANTHROPIC_API_KEY", retryable=False)
        if any(m.attachments for m in request.messages):
            # the attachments' bytes are read from storage (a disk, a bucket) per call: off the loop
            params = await asyncio.to_thread(self.params, request)
        else:
            params = self.params(request)
        attempt = 0
        while True:
            yielded = False
            snapshot = Snapshot()
            try:
                # the raw server-sent events, folded as plain JSON: the SDK's typed stream builds a
                # pydantic model per event that ``fold_event`` would only turn back into a dict
                async for event in self._events(params):
                    chunk = fold_event(snapshot, event)
                    if chunk is not None:
                        yielded = True
                        yield chunk
                if not snapshot.stopped:
                    raise ModelError("Anthropic API stream ended before message_stop", retryable=True)
            except CAUGHT as exc:
                failure = classify_error(exc)
                if failure.overflow and not yielded:
                    yield ModelReply(stop_reason=StopReason.CONTEXT_OVERFLOW)
                    return
                if not failure.retryable or yielded or attempt >= self.max_retries:
                    if failure.retryable and not yielded:
                        message = f"{failure.message} (gave up after {attempt + 1} attempts)"
                    else:
                        message = failure.message
                    raise ModelError(message, retryable=failure.retryable) from exc
                await self._sleep(self.backoff(attempt, failure))
                attempt += 1
                continue
            reply = reply_from(snapshot)
            yield ModelReply(reply.text, reply.tool_calls, reply.blocks, reply.stop_reason, reply.usage, self.served_by)
            return

    async def _events(self, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The stream's events as plain JSON dicts. Anthropic's API and Vertex's ``streamRawPredict``
        send server-sent events, read raw: the SDK's typed stream builds a pydantic model per event
        that ``fold_event`` would only turn back into a dict. Bedrock's stream is AWS's binary
        event stream, which only the SDK's typed stream decodes. On Anthropic's API the request
        is the SDK's, built once per client (``anthropic_http.Poster``)."""
        if self.platform == "bedrock":
            messages = self._client.beta.messages if "betas" in params else self._client.messages
            async with await messages.create(**params, stream=True) as stream:
                async for typed in stream:
                    yield typed.to_dict()
            return
        async with self._response(params) as response:
            read, errors = anthropic_http.reading(response)
            with errors:
                async for name, data in anthropic_http.events(read):
                    if name == b"error":
                        raise stream_error(data, anthropic_http.http_response(response))
                    text = data.decode()  # (json.loads of bytes would guess their encoding)
                    # the decoder's own scanner: an event's data is one JSON value, nothing around it
                    try:
                        found, end = _scan_json(text, 0)
                    except (StopIteration, ValueError):
                        end = -1
                    # anything else goes through the decoder: what it accepts, or its error
                    yield found if end == len(text) else _decode_json(text)

    @contextlib.asynccontextmanager
    async def _response(self, params: dict[str, Any]) -> AsyncIterator[httpx2.Response | anthropic_http.Streamed]:
        """The streamed call's HTTP response (closed on leaving)."""
        poster = anthropic_http.poster(self._client) if "betas" not in params else None
        if poster is None:
            messages = self._client.beta.messages if "betas" in params else self._client.messages
            async with messages.with_streaming_response.create(**params, stream=True) as response:
                yield response.http_response
            return
        http_response = await poster.send(params)
        try:
            yield http_response
        finally:
            await http_response.aclose()

    async def count_tokens(self, system: str, text: str) -> int:
        """The input tokens of ``system`` and one user message ``text``, counted by the API
        (``messages.count_tokens``; Vertex's ``count-tokens:rawPredict``). Raises the SDK's error
        where the platform cannot count (Bedrock, in this SDK) or the call fails."""
        params: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": text}]}
        if system:
            params["system"] = system
        counted = await self._client.messages.count_tokens(**params)
        return int(counted.input_tokens)

    async def aclose(self) -> None:
        """Nothing to close: the client is shared (``_client``) and lives with its process."""


async def close_clients(loop: Any) -> None:
    """Close the SDK clients of ``loop`` (``providers.long_lived_loop``), and their posters' pools."""
    await anthropic_http.close(platforms.clients_on(loop))
    await platforms.close_clients(loop)


def from_settings(config: dict[str, Any] | None = None, *, platform: str = "anthropic") -> AnthropicModel:
    """An :class:`AnthropicModel` from an agent's model settings.

    Keys: ``model``, ``max_tokens``, ``temperature``, ``thinking_budget``, ``max_retries``,
    ``context_window`` (tokens, for the engine's compaction), ``server_compaction`` (``True`` or
    ``{"trigger": input tokens, "instructions": str}``: the API's own compaction, a beta),
    ``prompt_cache`` (default True), ``cache_ttl`` (``"5m"``, the default, or ``"1h"``),
    ``cache_min_tokens`` (default: the model's minimum cacheable length), ``region`` and
    ``project_id`` (Bedrock's and Vertex's places, ``platforms``) (``provider`` is ignored);
    credentials and base URLs come from the environment. An unknown key or a bad value
    raises :class:`AgentConfigError` (a typo must not silently do nothing).
    """
    config = {k: v for k, v in (config or {}).items() if k != "provider"}
    place = {k: config.pop(k) for k in ("region", "project_id") if k in config}
    platforms.check_place(platform, place)
    unknown = set(config) - _SETTINGS_KEYS
    if unknown:
        raise AgentConfigError(f"unknown anthropic model settings: {', '.join(sorted(unknown))}")
    max_tokens = config.get("max_tokens", DEFAULT_MAX_TOKENS)
    budget = config.get("thinking_budget")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise AgentConfigError(f"max_tokens must be a positive integer, not {max_tokens!r}")
    if budget is not None and (not isinstance(budget, int) or not 1024 <= budget < max_tokens):
        raise AgentConfigError(
            f"thinking_budget must be an integer >= 1024 and < max_tokens ({max_tokens}), not {budget!r}"
        )
    temperature = config.get("temperature")
    if temperature is not None and not isinstance(temperature, (int, float)):
        raise AgentConfigError(f"temperature must be a number, not {temperature!r}")
    window = config.get("context_window", DEFAULT_CONTEXT_WINDOW)
    if not isinstance(window, int) or window < 1024:
        raise AgentConfigError(f"context_window must be an integer >= 1024, not {window!r}")
    server = config.get("server_compaction")
    if server is True:
        server = {}
    if server is not None and server is not False:
        if not isinstance(server, dict) or set(server) - _SERVER_COMPACTION_KEYS:
            raise AgentConfigError(
                "server_compaction must be True or a dict of trigger, instructions "
                f"(pause_after_compaction is not supported), not {server!r}"
            )
        trigger = server.get("trigger")
        if trigger is not None and (not isinstance(trigger, int) or trigger < 1):
            raise AgentConfigError(f"server_compaction trigger must be a positive integer, not {trigger!r}")
    else:
        server = None
    cache = config.get("prompt_cache", True)
    if not isinstance(cache, bool):
        raise AgentConfigError(f"prompt_cache must be True or False, not {cache!r}")
    ttl = config.get("cache_ttl", "5m")
    if ttl not in TTLS:
        raise AgentConfigError(f"cache_ttl must be one of {', '.join(TTLS)}, not {ttl!r}")
    min_tokens = config.get("cache_min_tokens")
    if min_tokens is not None and (not isinstance(min_tokens, int) or isinstance(min_tokens, bool) or min_tokens < 1):
        raise AgentConfigError(f"cache_min_tokens must be a positive integer, not {min_tokens!r}")
    return AnthropicModel(
        prompt_cache=cache,
        cache_ttl=ttl,
        cache_min_tokens=min_tokens,
        context_window=window,
        server_compaction=server,
        model=str(config.get("model") or DEFAULT_MODEL),
        max_tokens=max_tokens,
        temperature=None if temperature is None else float(temperature),
        thinking_budget=budget,
        max_retries=int(config.get("max_retries", DEFAULT_MAX_RETRIES)),
        platform=platform,
        place=place,
    )
