"""The workers' side of a run started from the admin: ``eval_tick`` moves it (``driver.run_step``)
for a couple of seconds, then queues itself again until the run is done. Any number of ticks (or
a look at the run's page, or ``june eval``) may move one run at once: a case is started and
scored by conditional UPDATEs (``driver``)."""

from __future__ import annotations

import time

from django.db import transaction
from django_q.tasks import async_task

from june_evals.driver import run_step
from june_evals.models import EvalRun
from june_evals.models.evalrows import RunStatus

#: how long one tick holds its worker's task slot (the turns themselves run on the runner's loop)
TICK_SECONDS = 2.0
POLL = 0.25


def schedule(run: EvalRun) -> None:
    """Queue the run's first tick once the transaction that made it commits."""
    transaction.on_commit(lambda: async_task("june_evals.evaltasks.eval_tick", run.pk, group="june-evals"))


def eval_tick(run_id: int) -> None:
    run = EvalRun.objects.filter(pk=run_id).first()
    if run is None or run.status == RunStatus.DONE:
        return
    deadline = time.monotonic() + TICK_SECONDS
    while not run_step(run=run):
        if time.monotonic() > deadline:
            async_task("june_evals.evaltasks.eval_tick", run_id, group="june-evals")
            return
        time.sleep(POLL)  # the runner's loop runs the turns meanwhile
