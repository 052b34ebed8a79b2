"""A Message Batches request and its answer as plain data, without the SDK (the site imports it
in every process; ``anthropic_batches`` holds the SDK's client, imported by the poller when it has work):
the request's ``custom_id``, its ``params``, and a batch's answer as the engine's
:class:`ModelReply`."""

from __future__ import annotations

import hashlib
from typing import Any

from agents_app.providers.anthropic_stream import OVERFLOW_WORDS, Snapshot, merge_usage, reply_from
from agents_app.runtime.model import ModelReply

#: the ``served_by`` platform of a batched call: ``anthropic-batch:<model>`` (priced at the batch
#: price, ``sessions_app.pricing``)
PLATFORM = "anthropic-batch"
#: a batched call's usage counts its tokens twice: as every call's (``input_tokens``, …) and again
#: under this prefix (``batch_input_tokens``, …), the part priced at the batch price
USAGE_PREFIX = "batch_"


def custom_id(key: str, attempt: int) -> str:
    """The request's id in its batch (the API's ``^[A-Za-z0-9_-]{1,64}$``): the same for every
    attempt of the turn's step, a new one for each request after a failed one."""
    return f"{hashlib.sha256(key.encode()).hexdigest()[:48]}-{attempt}"


def batch_params(params: dict[str, Any]) -> dict[str, Any]:
    """``AnthropicModel.params`` as one request's ``params`` in a batch: the SDK's keyword-only
    extras folded in (``extra_body``), ``betas`` kept apart for the batch's header."""
    params = dict(params)
    params.update(params.pop("extra_body", None) or {})
    return params


def reply_of(message: dict[str, Any], model: str) -> ModelReply:
    """A batch's answer (the API's message) as the reply the streamed call would have ended with;
    its usage also counted under ``USAGE_PREFIX``, and ``served_by`` saying it was a batch."""
    snapshot = Snapshot(content=[dict(b) for b in message.get("content") or ()], stop_reason=message.get("stop_reason"))
    merge_usage(snapshot, message.get("usage"))
    snapshot.stopped = True
    reply = reply_from(snapshot)
    usage = dict(reply.usage)
    usage.update({f"{USAGE_PREFIX}{k}": v for k, v in reply.usage.items() if v})
    served = f"{PLATFORM}:{message.get('model') or model}"
    return ModelReply(reply.text, reply.tool_calls, reply.blocks, reply.stop_reason, usage, served)


def overflowed(error: str) -> bool:
    """A batch's errored request says its prompt did not fit the model's context window."""
    return bool(OVERFLOW_WORDS.search(error or ""))
