"""Starting a turn from a request: at once, whatever the queue holds.

A request that starts a turn creates it, durably queued, and is answered (a 202, or the first
frame of its stream) without waiting for the workers: what waits behind a burst is the turn's
start, in the queue, never the request. (A door that held requests while the queue was deep
kept a burst's last clients past an ordinary client's timeout and cost more CPU per turn than
accepting them at once: docs/workers.md "A burst" has the figures.)

On SQLite one part stays: SQLite has one writer, and a thousand request threads each retrying
for its lock starve the workers' claims of theirs (django-q2's pusher marks a task taken with an
UPDATE), so the clusters all but stop taking tasks while the starts go on. So at most
``SQLITE_WRITERS`` starts of a web process write at once (``start_turn``); the others wait on a
semaphore, not on SQLite's lock, and the workers' writes get their turn."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connection

#: on SQLite, the starts of one web process that write at once
SQLITE_WRITERS = 2


_sqlite_writers = threading.BoundedSemaphore(SQLITE_WRITERS)


def start_turn(**start: Any) -> Any:
    """``services.turn_start(**start)``, at most ``SQLITE_WRITERS`` at once in this process on
    SQLite (the module's docstring says why); as it is elsewhere."""
    from sessions_app import services

    if connection.vendor != "sqlite":
        return services.turn_start(**start)
    with _sqlite_writers:
        return services.turn_start(**start)


__all__ = ["start_turn"]
