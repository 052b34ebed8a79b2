"""A worker SIGKILLed after taking a queued turn and before claiming it, on real clusters
(PostgreSQL: the claim is held at its session's row lock, which the take does not touch).

A runner takes a queued turn from the table (``workers.taker``: the row marked ``taken:<host:pid>``
until ``JUNE_REQUEUE_AFTER``), then its loop claims it. Killed in between, the worker leaves the
mark and no lease: no runner takes the turn until the mark runs out, then one does. Here the
claim had been sent and waited on the lock: its backend, which does not notice its client's death
while it waits, may still commit it once the lock goes (a lease of a dead owner, which the
sweeper hands on when it expires) or not (the mark runs out). Either way the turn runs exactly
once.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from .qcluster import wait_for
from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = 3.0


def test_a_turn_taken_by_a_worker_killed_before_its_claim_runs_once(clusters, fault_agent):
    from agents_app.models import Order
    from sessions_app.models import Event, Turn

    if connection.vendor != "postgresql":
        pytest.skip("on SQLite the take and the claim wait for the same write lock")
    for cluster in clusters.started:
        if cluster.alive():
            cluster.kill()
    turn_id = start_turn(fault_agent, "taken then killed")
    session_id = Turn.objects.get(pk=turn_id).session_id
    locked, release = threading.Event(), threading.Event()

    def hold_the_session() -> None:
        """The claim locks the turn's session first: held here, the claim waits after the take."""
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [session_id])
                locked.set()
                release.wait(60)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_session)
    holder.start()
    assert locked.wait(30)
    try:
        first = clusters.start(JUNE_REQUEUE_AFTER=str(WINDOW))
        wait_for(
            lambda: (Turn.objects.get(pk=turn_id).lease_owner or "").startswith("taken:"),
            timeout=60,
            what="the cluster to take the turn",
        )
        first.kill()  # SIGKILL of the whole cluster: its claim waited on the session's lock
        killed = time.monotonic()
    finally:
        release.set()
        holder.join(30)
    clusters.start(JUNE_REQUEUE_AFTER=str(WINDOW))
    assert wait_final(turn_id, timeout=90) == "completed"
    turn = Turn.objects.get(pk=turn_id)
    print(f"\nthe taken turn completed {time.monotonic() - killed:.1f} s after its taker's SIGKILL")
    assert turn.attempts in (1, 2), "claimed by the second cluster (after the dead claim, if it committed)"
    assert Event.objects.filter(turn_id=turn_id, type="turn.completed").count() == 1
    assert Order.objects.filter(turn_id=turn_id).count() == 1
