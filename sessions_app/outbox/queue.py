"""django-q2: the task names; the queued turns' wake-up.

Task functions are named by dotted path (django-q2 stores the name with the task), so this
module names them without importing the workers that define them."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Sequence

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Count, Min
from django_q.conf import Conf
from django_q.tasks import async_task

from sessions_app.outbox import doorbell
from sessions_app.store import opening
from sessions_app.store.checkpoint import IN_CHAIN

log = logging.getLogger(__name__)

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


#: the PostgreSQL channel on which the workers' runners listen for queued turns, and their wake-up
TURNS_CHANNEL = opening.TURNS_CHANNEL
WAKE = opening.WAKE


#: the turn can run now: no earlier turn of its session holds the chain (``lease.CLAIM``'s condition)
CHAIN_HEAD = (
    "NOT EXISTS (SELECT 1 FROM sessions_app_turn t JOIN sessions_app_turn p ON p.session_id = t.session_id "
    f'WHERE t.id = %s AND p."order" < t."order" AND p.status {IN_CHAIN})'
)


def enqueue_turn(turn_id: str) -> None:
    """A queued turn is delivered by its own row: a worker's runner takes it from the turn table
    when it has room (``sessions_app.workers.taker``). This only wakes the runners. On PostgreSQL
    a ``NOTIFY`` sent in the caller's transaction: PostgreSQL delivers it at that commit, never
    before the row is visible, and drops it with a rollback. On SQLite nothing: the runners
    watch the database's ``data_version``, which every commit of another connection moves. A
    wake-up is lost only with a listener's connection, and a taker that connects again looks at
    once (``workers.taker``).

    In django-q2's sync mode (``JUNE_Q_SYNC``: tests) the turn runs in this process at the
    commit, as ``run_turn``'s task did."""
    if Conf.SYNC:
        transaction.on_commit(lambda: _run_here(turn_id))
        return
    wake()


def enqueue_head(turn_id: str) -> None:
    """``enqueue_turn`` for a turn the host API dispatched (a start, a resume, the next turn after
    a cancel or reset). A runner takes only the head of a session's chain (the claim's
    condition), so a turn queued behind another waits in its row for the chain's hand-over (in
    sync mode it is not run here: the hand-over runs it). On PostgreSQL the wake-up is the
    process's ``Waker``'s, at the commit: the caller waits for no round trip."""
    if Conf.SYNC:
        transaction.on_commit(lambda: holds(CHAIN_HEAD, [turn_id]) and _run_here(turn_id))
        return
    if connections["default"].vendor == "postgresql":
        transaction.on_commit(_waker().ring)


def wake() -> None:
    connection = connections["default"]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(WAKE)


class Waker:
    """A process's wake-ups for turns already committed (``enqueue_head``: a start, a resume),
    sent by a thread of its own on a connection of its own. ``ring`` sets a flag and returns; the
    thread clears it, then sends one ``NOTIFY``, so every ring is followed by a wake-up sent
    after it. After a wake-up the thread lets ``WAKER_GAP`` pass before the next: a ring in a
    quiet process is sent at once, and the rings of a burst of starts share one wake-up per
    gap (each wakes every runner's taker, and each taker then looks at the table: one look for
    many turns, not one for a few, which mostly finds them taken). A start neither waits for a round
    trip of its own nor sends the ``NOTIFY`` in its creation's transaction, where PostgreSQL
    holds its notification lock from the commit's start to its end: a burst's creations then
    committed one at a time, each waiting for the one before it to reach the disk."""

    def __init__(self) -> None:
        self.sent = 0
        self._rung = threading.Event()
        self._thread = threading.Thread(target=self._run, name="june-waker", daemon=True)
        self._thread.start()

    def ring(self) -> None:
        self._rung.set()

    def _run(self) -> None:
        while True:
            if not self._rung.wait(WAKER_IDLE):
                connections.close_all()  # (a quiet process keeps no backend for it)
                self._rung.wait()
            self._rung.clear()
            try:
                wake()
                self.sent += 1
            except Exception:  # sent again after a pause: an idle runner's poll is long
                log.warning("waking the runners failed", exc_info=True)
                connections.close_all()
                self._rung.set()
                time.sleep(WAKER_RETRY)
                continue
            self._gap()

    def _gap(self) -> None:
        """The least time between two wake-ups: the rings meanwhile share the next."""
        time.sleep(WAKER_GAP)


#: seconds before a waker whose wake-up failed tries again (its connection is made anew), the
#: quiet after which it closes its connection, and the least time between two of its wake-ups
WAKER_RETRY = 0.5
WAKER_IDLE = 2.0
WAKER_GAP = 0.05
_wakers: dict[int, Waker] = {}
_wakers_lock = threading.Lock()


def _waker() -> Waker:
    """This process's ``Waker`` (a forked child makes its own: threads are not inherited)."""
    pid = os.getpid()
    waker = _wakers.get(pid)
    if waker is None:
        with _wakers_lock:
            waker = _wakers.get(pid) or _wakers.setdefault(pid, Waker())
    return waker


def _run_here(turn_id: str) -> None:
    async_task(RUN_TURN, turn_id, task_name=f"turn {turn_id}", group="june.turns", save=settings.JUNE_Q_SAVE_TURNS)


def holds(condition: str, params: list) -> bool:
    """Whether an SQL boolean ``condition`` holds now."""
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT 1 WHERE {condition}", params)
        return cursor.fetchone() is not None


def enqueue_delivery(delivery_id: int, *, turn_id: str = "") -> None:
    async_task(DELIVERY_RUN, delivery_id, task_name=f"deliver {turn_id}" if turn_id else None, group="june.deliveries")


def ring_on_commit(turn_ids: Sequence[str]) -> None:
    ids = list(turn_ids)
    if ids:
        transaction.on_commit(lambda: doorbell.ring(ids))


def tasks_forget(turn_ids: Sequence[str]) -> int:
    """Delete django-q2's rows about ``turn_ids`` (an erasure, a retention sweep): the saved
    results (``django_q_task``: a turn's or a delivery's, named after the turn; a failure's
    result may quote its text) and the queued packages (``django_q_ormq``, signed pickles:
    read to find their turn). A settled turn's queued package is a stale copy (a sweeper's
    re-enqueue) that would claim nothing. Returns how many rows went."""
    from django_q.models import OrmQ, Task
    from django_q.signing import SignedPackage

    ids = set(turn_ids)
    if not ids:
        return 0
    names = [f"{prefix} {turn_id}" for turn_id in sorted(ids) for prefix in ("turn", "deliver")]
    named, gone = set(names), 0
    for at in range(0, len(names), 500):
        gone += Task.objects.using(Conf.ORM).filter(name__in=names[at : at + 500]).delete()[0]
    queued = []
    for pk, payload in OrmQ.objects.using(Conf.ORM).values_list("pk", "payload").iterator(chunk_size=500):
        try:
            task = SignedPackage.loads(payload)
        except Exception:  # noqa: BLE001 - not ours to read (another key): not about these turns
            continue
        if not isinstance(task, dict):
            continue
        if task.get("name") in named or any(isinstance(a, str) and a in ids for a in task.get("args") or ()):
            queued.append(pk)
    if queued:
        gone += OrmQ.objects.using(Conf.ORM).filter(pk__in=queued).delete()[0]
    return gone


def queue_depth() -> tuple[int, Any]:
    """The queue's depth, read here only (``june_queue_depth``): the turns queued (a turn's row is
    its place in the queue), and when the oldest of them was created (None: none waits)."""
    from sessions_app.models import Turn

    row = Turn.objects.filter(status="queued").aggregate(depth=Count("id"), head=Min("created_at"))
    db = connections["default"]
    if getattr(db, "pool", None) is not None and not db.in_atomic_block:
        db.close()  # back to the pool between readings
    return row["depth"], row["head"]
