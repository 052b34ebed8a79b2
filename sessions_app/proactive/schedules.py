"""Schedules: agents start turns on their own, on a cron, as django-q2 schedules.

An agent declares them in ``agent.py`` (``agents_app.cron`` validates them and does the
tick arithmetic).

``schedules_sync()`` (``manage.py june_sync_schedules`` on deploy, and after ``migrate``) turns
them into django-q2 ``Schedule`` rows named ``june:<agent>:<name>`` that call ``fire``.

Exactly one turn per tick: ``fire`` records a ``ScheduleRun`` unique on (schedule, tick) with the
turn id decided up front, so two clusters firing the same tick (SQLite ignores django-q2's
``select_for_update``) or a redelivered task start one turn. A missed tick after downtime fires
once: django-q2 runs with ``catch_up=False`` and ``tick_for`` collapses late ticks into the
latest one.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any, Iterable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connections, transaction
from django.utils import timezone
from django_q.models import Schedule

from agents_app.cron import ScheduleDecl, declarations, next_tick, tick_for
from agents_app.models import ScheduleRun
from agents_app.runtime.errors import AgentConfigError, SessionSuspendedError, TurnConflictError
from agents_app.runtime.proactive import ChannelError, receive
from agents_app.runtime.session import LocalDispatcher, new_turn_id
from sessions_app import models as sm
from sessions_app import quotas, telemetry, wiring
from sessions_app.outbox.queue import DELIVERIES_SCHEDULE, DELIVERIES_SWEEP, FIRE, RENAMED
from sessions_app.proactive.channels import ScheduleChannel
from sessions_app.site_errors import RateLimited

log = logging.getLogger(__name__)

#: a run a rate limit or quota refused (``ScheduleRun.status``)
SKIPPED = "skipped"
#: the names ``fire`` had before (rows keep them until a sync corrects or removes them)
OLD_FIRE = [old for old, new in RENAMED.items() if new == FIRE]


# -- sync (deploy) ----------------------------------------------------------------------------------


def schedules_sync(*, agents: Iterable[Any] | None = None, now: datetime | None = None) -> dict[str, list[str]]:
    """Make django-q2's schedules match the declarations. Cron and kwargs follow ``agent.py``;
    an admin's enable/disable (``repeats``) survives a deploy. Undeclared ``fire`` schedules go."""

    if agents is None:
        agents = wiring.agents().values()
    now = now or timezone.now()
    decls = [d for a in agents for d in declarations(a, default_tz=settings.TIME_ZONE)]
    report: dict[str, list[str]] = {"created": [], "updated": [], "removed": []}
    with transaction.atomic():
        for d in decls:
            kwargs = repr({"agent": d.agent, "name": d.name})
            row = Schedule.objects.filter(name=d.q2_name).first()
            due = next_tick(d.cron, d.tz(), now)
            if row is None:
                row = Schedule.objects.create(
                    name=d.q2_name,
                    func=FIRE,
                    kwargs=kwargs,
                    schedule_type=Schedule.CRON,
                    cron=d.cron,
                    repeats=-1 if d.enabled else 0,
                    intended_date_kwarg="intended",
                )
                # django-q2 evaluates cron in settings.TIME_ZONE; the run time is the declared zone's
                Schedule.objects.filter(pk=row.pk).update(next_run=due)
                report["created"].append(d.q2_name)
            elif (row.func, row.kwargs, row.cron, row.intended_date_kwarg) != (FIRE, kwargs, d.cron, "intended"):
                Schedule.objects.filter(pk=row.pk).update(
                    func=FIRE,
                    kwargs=kwargs,
                    schedule_type=Schedule.CRON,
                    cron=d.cron,
                    intended_date_kwarg="intended",
                    next_run=due,
                )
                report["updated"].append(d.q2_name)
        stale = Schedule.objects.filter(func__in=[FIRE, *OLD_FIRE]).exclude(name__in=[d.q2_name for d in decls])
        report["removed"] = list(stale.values_list("name", flat=True))
        stale.delete()
        Schedule.objects.filter(name=DELIVERIES_SCHEDULE).exclude(func=DELIVERIES_SWEEP).update(func=DELIVERIES_SWEEP)
        if not Schedule.objects.filter(name=DELIVERIES_SCHEDULE).exists():
            # re-sends webhook deliveries whose trigger was lost (a crash between commit and publish)
            Schedule.objects.create(
                name=DELIVERIES_SCHEDULE,
                func=DELIVERIES_SWEEP,
                schedule_type=Schedule.MINUTES,
                minutes=1,
                repeats=-1,
                next_run=now + timedelta(minutes=1),
            )
            report["created"].append(DELIVERIES_SCHEDULE)
    return report


# -- firing (the q2 task) -----------------------------------------------------------------------------


def declaration(agent: str, name: str) -> ScheduleDecl:
    for d in declarations(wiring.agent(agent), default_tz=settings.TIME_ZONE):
        if d.name == name:
            return d
    raise AgentConfigError(f"agent {agent!r} declares no schedule {name!r}")


def fire(agent: str, name: str, intended: str | None = None, **_: Any) -> str:
    """django-q2 task: start the tick's one turn and deliver it to the schedule's session.

    Returns ``fired``, ``duplicate`` (this tick's turn exists: another cluster or an earlier
    delivery of this task started it), ``disabled``, or ``skipped`` (the schedule's rate,
    ``JUNE_RATE_SCHEDULE_TURNS_PER_HOUR``, or the agent's token quota of the day refused the
    run: the ScheduleRun is marked ``skipped`` with the reason, no turn is created); raises when the turn cannot start or
    its result cannot be delivered (the ScheduleRun keeps the error; q2 records a failure)."""
    decl = declaration(agent, name)
    row = Schedule.objects.filter(name=decl.q2_name).first()
    if row is not None and row.repeats == 0:
        return "disabled"
    cron = row.cron if row is not None and row.cron else decl.cron
    now = timezone.now()
    tick = tick_for(cron, decl.tz(), datetime.fromisoformat(intended) if intended else None, now)
    if row is not None:  # the declared zone decides the next run, not django-q2's settings zone
        Schedule.objects.filter(pk=row.pk).update(next_run=next_tick(cron, decl.tz(), max(now, tick)))
    run, _ = ScheduleRun.objects.get_or_create(
        schedule=decl.q2_name,
        tick=tick,
        defaults={"agent": agent, "session_key": decl.session_key(tick), "turn_id": new_turn_id()},
    )
    if run.status == SKIPPED:
        return SKIPPED
    if sm.Turn.objects.filter(pk=run.turn_id).exists():
        return "duplicate"
    try:
        admitted = quotas.admit_turn(agent=agent, schedule=decl.q2_name, source="schedule")
    except RateLimited as exc:  # the run is skipped, and says why (the admin lists runs)
        # an operator reads it: the setting that limits it is named
        ScheduleRun.objects.filter(pk=run.pk).update(status=SKIPPED, error=f"{exc} ({exc.limit})"[:2000])
        log.warning("schedule %s: run of %s skipped: %s", decl.q2_name, tick.isoformat(), exc)
        return SKIPPED
    try:
        _session_for_schedule(decl, run.session_key)
        # the tick's span (traces on): the turn's spans continue its trace
        with telemetry.request(
            "schedule_tick",
            **{"june.turn.source": "schedule", "gen_ai.agent.name": agent, "june.schedule": decl.q2_name},
        ):
            asyncio.run(_receive(decl, run))
    except Exception as exc:
        if not sm.Turn.objects.filter(pk=run.turn_id).exists():
            admitted.refund()  # no turn: the run did not start one
        # a concurrent firing of this tick created the turn first (conflict on its id)
        duplicate = isinstance(exc, (IntegrityError, TurnConflictError)) and not isinstance(exc, SessionSuspendedError)
        if duplicate and sm.Turn.objects.filter(pk=run.turn_id).exists():
            return "duplicate"
        ScheduleRun.objects.filter(pk=run.pk).update(status="failed", error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        connections.close_all()
    return "fired"


async def _receive(decl: ScheduleDecl, run: Any) -> None:
    # the firing worker drives its turn itself: no second worker is needed to wait on it
    rt = wiring.runtime(dispatcher=LocalDispatcher())
    rt.poll_interval = 0.5
    try:
        await receive(
            ScheduleChannel(),
            seed=decl.seed,
            target={"agent": decl.agent, "session": run.session_key, **({"batch": True} if decl.batch else {})},
            trigger={"kind": "proactive", "by": f"cron:{decl.name}"},
            session=rt.session(decl.agent, run.session_key),
            turn_id=run.turn_id,
            timeout=settings.JUNE_SCHEDULE_TURN_TIMEOUT,
        )
    finally:
        await sync_to_async(connections.close_all)()


def _session_for_schedule(decl: ScheduleDecl, key: str) -> None:
    """The run's session, owned by the declared user so it shows in their chat session list.
    A session of that key owned by anyone else is refused (ChannelError: the run fails loudly),
    never shared: users cannot create a schedule's key (``services.session_for_user``), and one
    made before that rule existed is not delivered into."""
    owner = get_user_model().objects.filter(**{sm.username_field(): decl.owner}).first() if decl.owner else None
    if decl.owner and owner is None:
        log.warning(
            "schedule %s: owner %r does not exist; the session has no owner (staff only)", decl.q2_name, decl.owner
        )
    session, created = sm.Session.objects.get_or_create(
        agent=decl.agent, key=key, defaults={"owner": owner, "title": decl.title}
    )
    if not created and session.owner_id is not None and session.owner_id != getattr(owner, "pk", None):
        raise ChannelError(f"schedule {decl.q2_name}: session {key!r} belongs to another user; not delivering into it")
    if not created and session.owner_id is None and owner is not None:
        sm.Session.objects.filter(pk=session.pk, owner__isnull=True).update(owner=owner)
    if not created and not session.title and decl.title:  # opened in the chat before its first run
        sm.Session.objects.filter(pk=session.pk, title="").update(title=decl.title)
