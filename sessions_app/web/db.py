"""Database calls from async views: each runs on the request's thread (as ``sync_to_async``
runs it), and the connection it used goes back to the pool right after.

A web process on PostgreSQL takes its connections from a bounded pool (``DATABASE_POOL``,
docs/workers.md "Connections"). A sync view holds one for its request; an async view may wait
for minutes between its queries (a turn it waits for, a stream), and a connection held across
that wait is one a burst of other requests cannot have. So an async view's queries give theirs
back as soon as they are done. Without a pool this changes nothing: the connection stays on the
request's thread until the request ends, as Django keeps it."""

from __future__ import annotations

import functools
from typing import Any, Callable

from asgiref.sync import sync_to_async
from django.db import connection


def released(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, giving its pooled connection back as soon as it returns. A sync view's request
    would hold it until Django's ``request_finished``, after its response was sent from the event
    loop: a round trip through a loop that a burst keeps busy, while other requests wait."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
                connection.close()  # back to the pool

    return call


@functools.cache
def db(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a coroutine function for an async view (made once per function)."""
    return sync_to_async(released(fn))
