"""What a schedule IS: an agent's declared schedules, validated, and the cron tick arithmetic
(pure: no Django). ``sessions_app.proactive.schedules`` turns them into django-q2 schedules and
fires their turns.

An agent declares them in ``agent.py``::

    schedules = [{
        "name": "daily-summary",          # unique within the agent
        "cron": "0 9 * * *",              # evaluated in ``timezone``
        "timezone": "Europe/Paris",       # default: settings.TIME_ZONE
        "seed": "summary of today",       # the trigger message of each run
        "session": "ops-inbox",           # a fixed session, or per run: "daily-{date}"
        "owner": "demo",                  # username owning the session (None: staff only)
        "title": "Ops inbox",             # optional session title
        "batch": True,                    # its model calls through the Message Batches API
    }]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from agents_app.runtime.errors import AgentConfigError

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
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
    #: its turns' model calls go through the Message Batches API (docs/providers.md)
    batch: bool = False

    @property
    def q2_name(self) -> str:
        return f"june:{self.agent}:{self.name}"

    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def session_pattern(self) -> re.Pattern[str]:
        """Every key ``session_key`` can produce (``{date}``/``{time}`` as digits)."""
        parts = re.split(r"(\{date\}|\{time\})", self.session)
        return re.compile(
            "".join(
                r"\d{4}-\d{2}-\d{2}" if p == "{date}" else r"\d{4}" if p == "{time}" else re.escape(p) for p in parts
            )
        )

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
        unknown = set(raw) - {"name", "cron", "timezone", "seed", "session", "owner", "title", "enabled", "batch"}
        if unknown:
            raise AgentConfigError(f"{where} has unknown keys {sorted(unknown)}")
        name = raw.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
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
        decl = ScheduleDecl(
            agent=agent.name,
            name=name,
            cron=cron,
            timezone=tz,
            seed=seed,
            session=session,
            owner=raw.get("owner"),
            title=str(raw.get("title") or ""),
            enabled=bool(raw.get("enabled", True)),
            batch=raw.get("batch", False) is True,
        )
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


def tick_for(
    cron: str, tz: ZoneInfo, intended: datetime | None, now: datetime, grace: timedelta | None = None
) -> datetime:
    """The tick a firing belongs to.

    ``intended`` is the run time django-q2 scheduled (the same for every cluster that saw the
    due row, so they agree on the tick); a firing whose next tick passed more than ``grace``
    ago is a catch-up after downtime, and all catch-ups collapse into the latest tick."""
    grace = CATCH_UP_GRACE if grace is None else grace
    tick = prev_tick(cron, tz, intended or now)
    if next_tick(cron, tz, tick) <= now - grace:
        tick = prev_tick(cron, tz, now)
    return tick
