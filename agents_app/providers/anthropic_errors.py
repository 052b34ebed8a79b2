"""What a failed Messages API call means (``anthropic``'s provider acts on it): an SDK or
transport error as overflow (the engine compacts), transient (retried, after the server's
``Retry-After`` when it gives one) or fatal, with the API's own words; and an ``error`` event in
a stream that had started, raised as the SDK's typed stream would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2  # the SDK's transport: a connection dropped mid-stream surfaces as its error

from agents_app.providers.anthropic_stream import OVERFLOW_WORDS
from agents_app.runtime.model import ModelError

#: error types the API reports (in a status body or an ``error`` stream event) that pass
_TRANSIENT_TYPES = frozenset(
    {
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "timeout_error",
        # the exception frames of Bedrock's response stream that pass (its docs: "retry your request")
        "serviceUnavailableException",
        "throttlingException",
        "internalServerException",
        "modelStreamErrorException",
    }
)
_OVERFLOW = OVERFLOW_WORDS


@dataclass(frozen=True)
class Failure:
    """What to do about a failed call: ``overflow`` (report it), retry, or give up."""

    message: str
    retryable: bool
    overflow: bool = False
    retry_after: float | None = None


def _retry_after(headers: Any) -> float | None:
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000
        if (seconds := headers.get("retry-after")) is not None:
            return float(seconds)
    except (TypeError, ValueError):  # an HTTP date: fall back to our own backoff
        pass
    return None


def classify_error(exc: BaseException) -> Failure:
    """An SDK or transport error → overflow / transient (retryable) / fatal, with a message
    that carries the API's own words."""
    if isinstance(exc, ModelError):
        return Failure(str(exc), retryable=exc.retryable)
    if isinstance(exc, anthropic.APIStatusError):
        status, etype = exc.status_code, exc.type or "error"
        detail = exc.api_message or exc.message
        if status == 200:  # an ``error`` event inside a stream that had started
            return Failure(f"Anthropic API {etype} mid-stream: {detail}", etype in _TRANSIENT_TYPES)
        message = f"Anthropic API {etype} ({status}): {detail}"
        if (status == 400 and _OVERFLOW.search(detail or "")) or status == 413:
            return Failure(message, retryable=False, overflow=True)
        transient = status in (408, 409, 429) or status >= 500
        return Failure(message, transient, retry_after=_retry_after(exc.response.headers) if transient else None)
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure(f"Anthropic API unreachable: {exc.message}", retryable=True)
    if isinstance(exc, httpx2.TransportError):
        return Failure(f"Anthropic API connection lost: {type(exc).__name__}: {exc}", retryable=True)
    return Failure(f"Anthropic API call failed: {type(exc).__name__}: {exc}", retryable=False)


#: what a call's ``try`` catches and classifies
CAUGHT = (anthropic.APIError, httpx2.TransportError, ModelError)


def stream_error(data: bytes | str, response: httpx2.Response) -> anthropic.APIStatusError:
    """An ``error`` event inside a stream that had started (its ``data``), as the SDK's typed
    stream raises it (a status error with the stream's 200 status and the event's body)."""
    try:
        body: Any = json.loads(data)
        message = f"{body}"
    except ValueError:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        body, message = text, text or f"Error code: {response.status_code}"
    return anthropic.APIStatusError(message, response=response, body=body)
