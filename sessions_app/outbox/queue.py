"""django-q2: the task names, and turns enqueued after the commit.

Task functions are named by dotted path (django-q2 stores the name with the task), so this
module names them without importing the workers that define them."""

from __future__ import annotations

from typing import Sequence

from django.conf import settings
from django.db import transaction
from django_q.tasks import async_task

from sessions_app.outbox import doorbell

RUN_TURN = "sessions_app.workers.tasks.run_turn"
SWEEP = "sessions_app.workers.tasks.sweep_expired_leases"
SWEEP_SCHEDULE = "june.sweep_expired_leases"
FIRE = "sessions_app.proactive.schedules.fire"
DELIVERY_RUN = "sessions_app.proactive.channels.delivery_run"
DELIVERIES_SWEEP = "sessions_app.proactive.channels.deliveries_sweep"
DELIVERIES_SCHEDULE = "june:deliveries"
#: names earlier versions stored in schedules (corrected on migrate)
RENAMED = {
    "sessions_app.tasks.run_turn": RUN_TURN,
    "sessions_app.tasks.sweep_expired_leases": SWEEP,
    "agents_app.schedules.fire": FIRE,
    "sessions_app.inbound.delivery_run": DELIVERY_RUN,
    "sessions_app.inbound.deliveries_sweep": DELIVERIES_SWEEP,
}


def enqueue_turn(turn_id: str) -> None:
    """Enqueue after the surrounding transaction commits: a worker never sees an uncommitted turn.
    A task that succeeded leaves no django-q2 result row unless ``JUNE_Q_SAVE_TURNS`` (the turn's
    row is its record; a failed task's row is kept)."""
    transaction.on_commit(lambda: async_task(RUN_TURN, turn_id, task_name=f"turn {turn_id}", group="june.turns",
                                             save=settings.JUNE_Q_SAVE_TURNS))


def enqueue_delivery(delivery_id: int, *, turn_id: str = "") -> None:
    async_task(DELIVERY_RUN, delivery_id, task_name=f"deliver {turn_id}" if turn_id else None,
               group="june.deliveries")


def ring_on_commit(turn_ids: Sequence[str]) -> None:
    ids = list(turn_ids)
    if ids:
        transaction.on_commit(lambda: doorbell.ring(ids))
