"""Schedules: agents start turns on their own, on a cron, as django-q2 schedules.

An agent declares them in ``agent.py``::

    schedules = [{
        "name": "daily-summary",          # unique within the agent
        "cron": "0 9 * * *",              # evaluated in ``timezone``
        "timezone": "Europe/Paris",       # default: settings.TIME_ZONE
        "seed": "summary of today",       # the trigger message of each run
        "session": "ops-inbox",           # a fixed session, or per run: "daily-{date}"
        "owner": "demo",                  # username owning the session (None: staff only)
        "title": "Ops inbox",             # optional session title
    }]

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
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from agents_app.runtime.errors import AgentConfigError, SessionSuspendedError, TurnConflictError

log = logging.getLogger(__name__)

FIRE = "agents_app.schedules.fire"
SWEEP = "sessions_app.inbound.deliveries_sweep"
SWEEP_NAME = "june:deliveries"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
#: a tick whose successor passed more than this long ago is a catch-up of missed runs
CATCH_UP_GRACE = timedelta(seconds=30)


@dataclass(frozen=True)
class ScheduleDecl:
    agent: str
    name: str
    cron: str
    timezone: str
    seed: str
    session: str
    owner: str | None = None
    title: str = ""
    enabled: bool = True

    @property
    def q2_name(self) -> str:
        return f"june:{self.agent}:{self.name}"

    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def session_key(self, tick: datetime) -> str:
        """The run's session: ``{date}``/``{time}`` are the tick's, in the schedule's zone."""
        local = tick.astimezone(self.tz())
        return self.session.format(date=local.strftime("%Y-%m-%d"), time=local.strftime("%H%M"))


def declarations(agent: Any, *, default_tz: str = "UTC") -> list[ScheduleDecl]:
    """The agent's validated schedule declarations (AgentConfigError names the bad field)."""
    out: list[ScheduleDecl] = []
    for i, raw in enumerate(agent.schedules or []):
        where = f"agent {agent.name!r}: schedules[{i}]"
        if not isinstance(raw, dict):
            raise AgentConfigError(f"{where} must be a dict")
        unknown = set(raw) - {"name", "cron", "timezone", "seed", "session", "owner", "title", "enabled"}
        if unknown:
            raise AgentConfigError(f"{where} has unknown keys {sorted(unknown)}")
        name = raw.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise AgentConfigError(f"{where}: name must be lower-case letters, digits, _ and - (got {name!r})")
        cron = raw.get("cron")
        if not isinstance(cron, str) or not croniter.is_valid(cron):
            raise AgentConfigError(f"{where} ({name}): invalid cron expression {cron!r}")
        tz = raw.get("timezone") or default_tz
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise AgentConfigError(f"{where} ({name}): unknown time zone {tz!r}") from None
        seed = raw.get("seed")
        if not isinstance(seed, str) or not seed.strip():
            raise AgentConfigError(f"{where} ({name}): seed must be a non-empty string")
        session = raw.get("session") or f"schedule-{name}"
        try:
            session.format(date="2000-01-01", time="0000")
        except (KeyError, IndexError, ValueError):
            raise AgentConfigError(f"{where} ({name}): session may use only {{date}} and {{time}}") from None
        decl = ScheduleDecl(agent=agent.name, name=name, cron=cron, timezone=tz, seed=seed, session=session,
                            owner=raw.get("owner"), title=str(raw.get("title") or ""),
                            enabled=bool(raw.get("enabled", True)))
        if any(d.name == name for d in out):
            raise AgentConfigError(f"{where}: two schedules named {name!r}")
        out.append(decl)
    return out


# -- ticks (pure) ---------------------------------------------------------------------------------

def prev_tick(cron: str, tz: ZoneInfo, at: datetime) -> datetime:
    """The latest tick at or before ``at``."""
    local = at.astimezone(tz)
    if croniter.match(cron, local.replace(microsecond=0)) and local.second == 0 and local.microsecond == 0:
        return local
    return croniter(cron, local).get_prev(datetime)


def next_tick(cron: str, tz: ZoneInfo, after: datetime) -> datetime:
    """The first tick strictly after ``after``."""
    return croniter(cron, after.astimezone(tz)).get_next(datetime)


def tick_for(cron: str, tz: ZoneInfo, intended: datetime | None, now: datetime,
             grace: timedelta | None = None) -> datetime:
    """The tick a firing belongs to.

    ``intended`` is the run time django-q2 scheduled (the same for every cluster that saw the
    due row, so they agree on the tick); a firing whose next tick passed more than ``grace``
    ago is a catch-up after downtime, and all catch-ups collapse into the latest tick."""
    grace = CATCH_UP_GRACE if grace is None else grace
    tick = prev_tick(cron, tz, intended or now)
    if next_tick(cron, tz, tick) <= now - grace:
        tick = prev_tick(cron, tz, now)
    return tick


# -- sync (deploy) ----------------------------------------------------------------------------------

def schedules_sync(*, agents: Iterable[Any] | None = None, now: datetime | None = None) -> dict[str, list[str]]:
    """Make django-q2's schedules match the declarations. Cron and kwargs follow ``agent.py``;
    an admin's enable/disable (``repeats``) survives a deploy. Undeclared ``fire`` schedules go."""
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone
    from django_q.models import Schedule

    if agents is None:
        from sessions_app import engine

        agents = engine.agents().values()
    now = now or timezone.now()
    decls = [d for a in agents for d in declarations(a, default_tz=settings.TIME_ZONE)]
    report: dict[str, list[str]] = {"created": [], "updated": [], "removed": []}
    with transaction.atomic():
        for d in decls:
            kwargs = repr({"agent": d.agent, "name": d.name})
            row = Schedule.objects.filter(name=d.q2_name).first()
            due = next_tick(d.cron, d.tz(), now)
            if row is None:
                row = Schedule.objects.create(name=d.q2_name, func=FIRE, kwargs=kwargs, schedule_type=Schedule.CRON,
                                              cron=d.cron, repeats=-1 if d.enabled else 0,
                                              intended_date_kwarg="intended")
                # django-q2 evaluates cron in settings.TIME_ZONE; the run time is the declared zone's
                Schedule.objects.filter(pk=row.pk).update(next_run=due)
                report["created"].append(d.q2_name)
            elif (row.func, row.kwargs, row.cron, row.intended_date_kwarg) != (FIRE, kwargs, d.cron, "intended"):
                Schedule.objects.filter(pk=row.pk).update(func=FIRE, kwargs=kwargs, schedule_type=Schedule.CRON,
                                                          cron=d.cron, intended_date_kwarg="intended", next_run=due)
                report["updated"].append(d.q2_name)
        stale = Schedule.objects.filter(func=FIRE).exclude(name__in=[d.q2_name for d in decls])
        report["removed"] = list(stale.values_list("name", flat=True))
        stale.delete()
        if not Schedule.objects.filter(name=SWEEP_NAME).exists():
            # re-sends webhook deliveries whose trigger was lost (a crash between commit and publish)
            Schedule.objects.create(name=SWEEP_NAME, func=SWEEP, schedule_type=Schedule.MINUTES, minutes=1,
                                    repeats=-1, next_run=now + timedelta(minutes=1))
            report["created"].append(SWEEP_NAME)
    return report


def sync_on_migrate(sender: Any, **kwargs: Any) -> None:
    """post_migrate: a fresh or migrated database gets the declared schedules."""
    schedules_sync()


# -- firing (the q2 task) -----------------------------------------------------------------------------

def declaration(agent: str, name: str) -> ScheduleDecl:
    from django.conf import settings

    from sessions_app import engine

    for d in declarations(engine.agent(agent), default_tz=settings.TIME_ZONE):
        if d.name == name:
            return d
    raise AgentConfigError(f"agent {agent!r} declares no schedule {name!r}")


def fire(agent: str, name: str, intended: str | None = None, **_: Any) -> str:
    """django-q2 task: start the tick's one turn and deliver it to the schedule's session.

    Returns ``fired``, ``duplicate`` (this tick's turn exists: another cluster or an earlier
    delivery of this task started it) or ``disabled``; raises when the turn cannot start or
    its result cannot be delivered (the ScheduleRun keeps the error; q2 records a failure)."""
    from django.db import IntegrityError, connections
    from django.utils import timezone
    from django_q.models import Schedule

    from agents_app.models import ScheduleRun
    from sessions_app import models as sm

    decl = declaration(agent, name)
    row = Schedule.objects.filter(name=decl.q2_name).first()
    if row is not None and row.repeats == 0:
        return "disabled"
    cron = (row.cron if row is not None and row.cron else decl.cron)
    now = timezone.now()
    tick = tick_for(cron, decl.tz(), datetime.fromisoformat(intended) if intended else None, now)
    if row is not None:  # the declared zone decides the next run, not django-q2's settings zone
        Schedule.objects.filter(pk=row.pk).update(next_run=next_tick(cron, decl.tz(), max(now, tick)))
    run, _ = ScheduleRun.objects.get_or_create(
        schedule=decl.q2_name, tick=tick,
        defaults={"agent": agent, "session_key": decl.session_key(tick), "turn_id": uuid.uuid4().hex},
    )
    if sm.Turn.objects.filter(pk=run.turn_id).exists():
        return "duplicate"
    _session_for_schedule(decl, run.session_key)
    try:
        asyncio.run(_receive(decl, run))
    except Exception as exc:
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
    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.db import connections

    from agents_app.runtime.channels import receive
    from agents_app.runtime.session import LocalDispatcher
    from sessions_app import engine
    from sessions_app.inbound import ScheduleChannel

    # the firing worker drives its turn itself: no second worker is needed to wait on it
    rt = engine.runtime(dispatcher=LocalDispatcher())
    rt.poll_interval = 0.5
    try:
        await receive(
            ScheduleChannel(), seed=decl.seed, target={"agent": decl.agent, "session": run.session_key},
            trigger={"kind": "proactive", "by": f"cron:{decl.name}"}, session=rt.session(decl.agent, run.session_key),
            turn_id=run.turn_id, timeout=getattr(settings, "JUNE_SCHEDULE_TURN_TIMEOUT", 900),
        )
    finally:
        await sync_to_async(connections.close_all)()


def _session_for_schedule(decl: ScheduleDecl, key: str) -> None:
    """The run's session, owned by the declared user so it shows in their chat session list."""
    from django.contrib.auth import get_user_model

    from sessions_app import models as sm

    owner = get_user_model().objects.filter(username=decl.owner).first() if decl.owner else None
    if decl.owner and owner is None:
        log.warning("schedule %s: owner %r does not exist; the session has no owner (staff only)",
                    decl.q2_name, decl.owner)
    session, created = sm.Session.objects.get_or_create(
        agent=decl.agent, key=key, defaults={"owner": owner, "title": decl.title})
    if not created and session.owner_id is None and owner is not None:
        sm.Session.objects.filter(pk=session.pk, owner__isnull=True).update(owner=owner)
    if not created and not session.title and decl.title:  # opened in the chat before its first run
        sm.Session.objects.filter(pk=session.pk, title="").update(title=decl.title)
