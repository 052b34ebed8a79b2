"""Where a Claude model is reached: Anthropic's API, AWS Bedrock or Google Vertex AI, each through
the ``anthropic`` SDK's own client (``AsyncAnthropic``, ``AsyncAnthropicBedrock``,
``AsyncAnthropicVertex``). The request and the stream are the Messages API's on all three; what
differs is the client: its credentials, its URL, and Bedrock's stream encoding (AWS's binary
event stream, which the SDK decodes).

Credentials and places come from each platform's own environment, read by the SDK and its
libraries, never from the database or an agent's folder:

- ``anthropic``: ``ANTHROPIC_API_KEY`` (``ANTHROPIC_BASE_URL`` for another endpoint).
- ``bedrock``: the AWS chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``
  or a profile), ``AWS_REGION``; ``ANTHROPIC_BEDROCK_BASE_URL`` for another endpoint. Needs the
  ``bedrock`` extra (boto3).
- ``vertex``: Google's application default credentials, ``CLOUD_ML_REGION`` and
  ``ANTHROPIC_VERTEX_PROJECT_ID``; ``ANTHROPIC_VERTEX_BASE_URL`` for another endpoint. Needs the
  ``vertex`` extra (google-auth) unless an access token is given.

An agent may name a region or project in its model settings (``region``, ``project_id``): places,
not secrets.

One SDK client per (platform, options, event loop) in a process: a worker drives hundreds of turns
on one loop, and a client is a connection pool (``_CLIENTS``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import weakref
from typing import Any

import anthropic

from agents_app.runtime.errors import AgentConfigError

PLATFORMS = ("anthropic", "bedrock", "vertex")
#: model settings each platform takes besides the model's own (where to reach it)
PLACE_KEYS: dict[str, frozenset[str]] = {
    "anthropic": frozenset(),
    "bedrock": frozenset({"region"}),
    "vertex": frozenset({"region", "project_id"}),
}
#: the extra that brings a platform's libraries (``pip install june-django[bedrock]``)
EXTRAS = {"bedrock": "bedrock", "vertex": "vertex"}

_CLIENTS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


def check_place(platform: str, place: dict[str, Any]) -> None:
    """Raise AgentConfigError for a platform this module does not know, or a setting it does not take."""
    if platform not in PLATFORMS:
        raise AgentConfigError(f"unknown Claude platform {platform!r} (one of {', '.join(PLATFORMS)})")
    unknown = set(place) - PLACE_KEYS[platform]
    if unknown:
        raise AgentConfigError(f"unknown {platform} model settings: {', '.join(sorted(unknown))}")
    for key, value in place.items():
        if not isinstance(value, str) or not value:
            raise AgentConfigError(f"{platform} {key} must be a non-empty string, not {value!r}")


def client(
    platform: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float,
    place: dict[str, str] | None = None,
    long_lived: bool = False,
) -> Any:
    """The SDK client for ``platform`` on the running loop (a client of its own outside a loop).
    ``api_key``: Anthropic's API key, Vertex's access token, or Bedrock's API key (a bearer token
    instead of AWS's signature); None lets each SDK client find its own."""
    try:
        loop: Any = asyncio.get_running_loop()
    except RuntimeError:  # made outside a loop (a test, a check): a client of its own
        loop = None
    key = (platform, api_key, base_url, timeout, tuple(sorted((place or {}).items())))
    clients = _CLIENTS.setdefault(loop, {}) if loop is not None else {}
    found = clients.get(key)
    if found is None:
        # the SDK's retries are off: the policy is the provider's, and visible to tests
        options: dict[str, Any] = {"max_retries": 0, "timeout": timeout, **_sdk_spans()}
        if loop is not None and long_lived:
            http_client = _aiohttp_client()
            if http_client is not None:
                options["http_client"] = http_client
        found = clients[key] = _build(platform, api_key, base_url, place or {}, options)
    return found


def _build(
    platform: str, api_key: str | None, base_url: str | None, place: dict[str, str], options: dict[str, Any]
) -> Any:
    if platform == "anthropic":
        return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, **options)
    try:
        if platform == "vertex":
            return anthropic.AsyncAnthropicVertex(
                region=place.get("region") or anthropic.NOT_GIVEN,
                project_id=place.get("project_id") or anthropic.NOT_GIVEN,
                access_token=api_key,
                base_url=base_url,
                **options,
            )
        return anthropic.AsyncAnthropicBedrock(
            aws_region=place.get("region"), api_key=api_key, base_url=base_url, **options
        )
    except ImportError as exc:  # the platform's own libraries (boto3, google-auth) are an extra
        raise AgentConfigError(
            f"the {platform} platform needs its libraries: pip install 'june-django[{EXTRAS[platform]}]' ({exc})"
        ) from exc
    except (ValueError, anthropic.AnthropicError) as exc:  # e.g. no region configured
        raise AgentConfigError(f"the {platform} platform is not configured: {exc}") from exc


def _sdk_spans() -> dict[str, Any]:
    """The client's ``open_telemetry`` option: off (``False``) unless an
    ``ANTHROPIC_OPEN_TELEMETRY*`` variable asks the SDK for its own spans (then unset: the SDK
    reads them). June's telemetry already has a ``chat`` span per model call
    (``sessions_app.telemetry``); the SDK's would be a second one, and the SDK works out its
    attributes for every request even when no tracer records them (a share of a worker's CPU a
    profile of a burst shows). Empty for an SDK without the option."""
    if any(name.startswith("ANTHROPIC_OPEN_TELEMETRY") for name in os.environ):
        return {}
    if "open_telemetry" not in inspect.signature(anthropic.AsyncAnthropic.__init__).parameters:
        return {}
    return {"open_telemetry": False}


def _aiohttp_client() -> Any:
    """The SDK's aiohttp transport (its ``aiohttp`` extra, a dependency of this project): a
    streamed call costs a worker less CPU than the default httpx transport, most of it in
    parsing the stream (``bench/bench_transport.py`` prints both). None without aiohttp installed."""
    try:
        return anthropic.DefaultAioHttpClient()
    except RuntimeError:  # the SDK says the extra is missing
        return None


def clients_on(loop: Any) -> list[Any]:
    """The clients made on ``loop``."""
    return list((_CLIENTS.get(loop) or {}).values())


async def close_clients(loop: Any) -> None:
    """Close the clients of ``loop`` (the running one) and forget them: its aiohttp sessions
    belong to it (``providers.long_lived_loop``)."""
    for found in (_CLIENTS.pop(loop, None) or {}).values():
        await found.close()
