"""A turn's model calls through the Message Batches API, on the turn's side: ``BatchModel`` wraps
an agent's model; a request with a ``batch_key`` (``Attempt.batch_key``: a schedule's or a
webhook's turn of an agent that batches) is written to the ledger (``models.BatchCall``, an
``intent`` with the whole request) and the turn parks (``ModelParked``): no worker waits. The
poller (``sessions_app.workers.batch_poller``) sends the intents, collects the answers and queues the
turns again; the step runs again and finds its answer here.

The write comes before anything is sent, and its key is the step's (the same for every attempt),
so a crash at any point sends the request at most once and keeps the answer: a redelivered step
finds its row, whatever the row's state. A failed request (errored, expired) fails the step
with a retryable error, once (``reported``): the turn's next attempt writes a new request
(``attempt`` + 1). One that did not fit the model's context window (an errored "prompt is too
long", or the stop reason ``model_context_window_exceeded``) is reported too, as an overflow: the
loop compacts the transcript and the step's next request, the compacted one, is a new row. A park gives the turn's attempt back, so the step's requests are its retry
budget: the ``JUNE_MAX_ATTEMPTS``-th failed one fails the turn."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from asgiref.sync import sync_to_async

from agents_app.providers.batch_requests import batch_params, custom_id, overflowed, reply_of
from agents_app.runtime.agent import Agent
from agents_app.runtime.model import (
    ContextOverflowError,
    ModelChunk,
    ModelError,
    ModelParked,
    ModelRequest,
    StopReason,
)
from agents_app.runtime.seams import Model
from sessions_app import models as m

#: the park reason (``pending["reason"]``) of a turn waiting on a batch
REASON = "batch"


def latest(key: str) -> m.BatchCall | None:
    return m.BatchCall.objects.filter(key=key).order_by("-attempt").first()


def write_intent(key: str, attempt: int, agent: str, params: dict[str, Any]) -> m.BatchCall:
    """The request, before anything is sent (idempotent: a redelivered step finds it)."""
    row, _ = m.BatchCall.objects.get_or_create(
        custom_id=custom_id(key, attempt),
        defaults={
            "key": key,
            "attempt": attempt,
            "turn_id": key.partition(":")[0],
            "agent": agent,
            "params": params,
            "created_at": time.time(),
        },
    )
    return row


def mark_reported(pk: str) -> None:
    m.BatchCall.objects.filter(pk=pk).update(reported=True)


def direct_model(model: Any) -> Any:
    """The agent's model on Anthropic's own platform (alone, or the first of a fallback list
    that names it), which builds the batch's requests; None when it has none."""
    for candidate in [model, *(c.model for c in getattr(model, "candidates", ()))]:
        if getattr(candidate, "platform", None) == "anthropic" and hasattr(candidate, "params"):
            return candidate
    return None


class BatchModel:
    """``inner`` answers every request without a ``batch_key``; the others go to the ledger."""

    def __init__(self, inner: Model, agent: Agent, *, max_attempts: int) -> None:
        self.inner = inner
        self.agent = agent
        #: requests a step may send (the turn's retry budget, ``JUNE_MAX_ATTEMPTS``)
        self.max_attempts = max_attempts

    def __getattr__(self, name: str) -> Any:  # the compactor reads the model's context window
        return getattr(self.inner, name)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        if not request.batch_key:
            async for chunk in self.inner.stream(request):
                yield chunk
            return
        direct = direct_model(self.inner)
        if direct is None:
            raise ModelError(
                f"agent {self.agent.name!r} batches its calls (batch = True), which needs a model on "
                "Anthropic's API (anthropic:…): Bedrock and Vertex batch through buckets, not supported",
                retryable=False,
            )
        key = request.batch_key
        row = await sync_to_async(latest)(key)
        if row is None or row.reported:  # (a failed request, or an overflowed answer: the next is new)
            # the attachments' bytes are read from storage: off the loop
            params = batch_params(await asyncio.to_thread(direct.params, request))
            attempt = 1 if row is None else row.attempt + 1
            row = await sync_to_async(write_intent)(key, attempt, self.agent.name, params)
        if row.status == m.BatchStatus.DONE:
            reply = reply_of(row.result or {}, direct.model)
            if reply.stop_reason == StopReason.CONTEXT_OVERFLOW:
                # the loop compacts and asks again: the compacted request is a new one (attempt + 1)
                await sync_to_async(mark_reported)(row.pk)
            yield reply
            return
        if row.status == m.BatchStatus.FAILED:
            await sync_to_async(mark_reported)(row.pk)
            message = f"message batch {row.batch_id or '(none)'}: {row.error}"
            if overflowed(row.error):  # compacted and asked again (the loop's bound: twice a step)
                raise ContextOverflowError(message)
            if row.attempt >= self.max_attempts:  # a park refunds the turn's attempt: counted here
                raise ModelError(f"{message}; retry budget exhausted after {row.attempt} requests", retryable=False)
            raise ModelError(message, retryable=True)
        raise ModelParked(
            REASON, {"key": key, "custom_id": row.custom_id, "attempt": row.attempt, "batch_id": row.batch_id}
        )

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def batching(model_for: Any, *, max_attempts: int) -> Any:
    """``model_for`` whose models batch for the agents that say so (``Agent.batch``, or a
    schedule's ``batch``); the others' are left as they are."""

    def wrapped(agent: Agent) -> Model:
        model = model_for(agent)
        if agent.batch or any(isinstance(s, dict) and s.get("batch") for s in agent.schedules):
            return BatchModel(model, agent, max_attempts=max_attempts)
        return model

    return wrapped
