"""django-q2 entry points: thin, load by id.

``run_turn`` drives one turn (claim, heartbeat, the loop) and then hands the session's chain to
its next queued turn.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django_q.tasks import async_task

from agents_app.runtime.seams import SessionRef

log = logging.getLogger(__name__)


def enqueue_turn(turn_id: str) -> None:
    """Enqueue after the surrounding transaction commits: a worker never sees an uncommitted turn."""
    transaction.on_commit(lambda: async_task("sessions_app.tasks.run_turn", turn_id, task_name=f"turn {turn_id}",
                                             group="june.turns"))


class Q2Dispatcher:
    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        from asgiref.sync import sync_to_async

        await sync_to_async(enqueue_turn)(turn_id)


def run_turn(turn_id: str) -> str | None:
    from . import engine

    async def drive() -> str | None:
        executor = engine.executor()
        try:
            status = await executor.drive(turn_id)
            if status is not None:
                rec = await executor.store.get_turn(turn_id)
                nxt = await executor.store.next_queued(rec.session)
                if nxt:
                    await sync_to_async(enqueue_turn)(nxt)
        finally:
            # the store's thread keeps its own connection: do not leak it past the task
            await sync_to_async(connections.close_all)()
        return str(status) if status else None

    return asyncio.run(drive())
