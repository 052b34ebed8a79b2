"""The cancel doorbell: a live message to the worker running a turn. The request itself is a
row (honoured at the attempt's next commit or heartbeat); the doorbell only makes it prompt,
so a lost ring costs latency, never correctness.

``ring`` is the sending side (services, after the commit); ``cancel_listener`` the receiving
side (the executor's ``on_signals`` hook in a worker)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Callable, Sequence

from asgiref.sync import async_to_sync, sync_to_async
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers, get_channel_layer

from agents_app.runtime.control import Signals
from sessions_app import models as m

log = logging.getLogger(__name__)


def cancel_group(turn_id: str) -> str:
    return f"june.turn.{turn_id}"


def ring(turn_ids: Sequence[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for turn_id in turn_ids:
        try:
            async_to_sync(layer.group_send)(cancel_group(turn_id), {"type": "june.cancel", "turn_id": turn_id})
        except Exception:  # the row is the truth: the worker sees it at its next commit or heartbeat
            log.exception("cancel doorbell for %s failed", turn_id)


#: each event loop's own channels_redis client (see ``receiving_layer``)
_loop_layers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def receiving_layer() -> Any:
    """The channel layer to receive on from the running event loop (None without a layer).

    A channels_redis client keeps its receive state (the lock on the process's channel, the
    buffers) on the instance, bound to the loop that first waited on it. A worker runs every
    task in a fresh ``asyncio.run``: an attempt that ended mid-receive left that lock bound to its
    dead loop, and the next attempt's listener stopped with "… is bound to a different event
    loop" — its live cancel was lost. So each loop receives through a client of its own (its
    pools close with the loop). Other layers are shared: ours (``outbox.layers``) receives on any
    loop, and an in-memory layer's copy would hear nothing."""
    layer = get_channel_layer()
    if layer is None or not type(layer).__module__.startswith("channels_redis"):
        return layer
    loop = asyncio.get_running_loop()
    own = _loop_layers.get(loop)
    if own is None:
        own = _loop_layers[loop] = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    return own


def cancel_listener(turn_id: str, signals: Signals) -> Callable[[], None]:
    """Listen on the turn's doorbell while the attempt runs. Returns the unsubscribe."""
    layer = receiving_layer()
    if layer is None:
        return lambda: None
    stopped = asyncio.Event()
    task = asyncio.get_running_loop().create_task(_listen(layer, cancel_group(turn_id), turn_id, signals, stopped))

    def unsubscribe() -> None:
        stopped.set()
        task.cancel()

    return unsubscribe


async def _listen(layer: Any, group: str, turn_id: str, signals: Signals, stopped: asyncio.Event) -> None:
    """Until ``stopped``. channels_redis (redis-py) can swallow the cancel of a receive blocked in
    BZPOPMIN when a message lands at that moment: the receive returns the message instead, and a
    listener that went on receiving would never end — nor would the ``asyncio.run`` of its task."""
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    try:
        while not stopped.is_set():
            message = await layer.receive(channel)
            if stopped.is_set():
                break
            if message.get("type") == "june.cancel":
                reason = message.get("reason") or await _durable_reason(turn_id)
                log.info("turn %s: live cancel (%s)", turn_id, reason)
                signals.cancel(reason)
    except asyncio.CancelledError:
        raise
    except Exception:  # a doorbell: the row still carries the request
        log.exception("turn %s: cancel listener stopped", turn_id)
    finally:
        try:
            await asyncio.shield(layer.group_discard(group, channel))
        except BaseException:  # the loop may be closing; groups expire on their own
            pass


async def _durable_reason(turn_id: str) -> str:
    reason = await sync_to_async(
        lambda: m.Turn.objects.filter(pk=turn_id).values_list("cancel_reason", flat=True).first()
    )()
    return reason or "requested"
