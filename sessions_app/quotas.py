"""Per-user rate limits and quotas: who may start how many turns, and spend how many tokens.

A new turn is admitted or refused before anything of it is created (``services.turn_start``,
the webhook channel, a schedule's ``fire``); a refusal is ``RateLimited`` (HTTP 429 with
``Retry-After``, a websocket error frame with ``retry_after``, a skipped schedule run).

- **Rates** (turns started per window) are counted in ``RateCounter`` rows, one per (scope,
  subject, window), by ONE statement: an upsert whose update only happens below the limit
  (``ADMIT``). Of N concurrent starts against a limit of L exactly L get a row back, on SQLite
  (≥ 3.35, for ``RETURNING``) and PostgreSQL alike; the count lives in the database, so it holds
  across processes, sites and restarts. Windows are fixed (the minute, the hour), so a burst
  straddling a window's end may start up to twice the limit within one window's length.
- **Quotas** (tokens per UTC day) are read from what turns recorded (``Turn.usage``, written at
  every settle, a parked, failed or cancelled turn's included): a user's turns of today with their
  subagents' spend, an agent's turns of today (every source). A turn running now counts once it
  settles or parks; the quota refuses the next turn, never stops a running one (the per-turn
  limits of ``agents_app.runtime.limits`` bound that).

Every limit is a setting (0 = off; ``JUNE_RATE_LIMITS=0`` turns all of them off).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from sessions_app import models as m
from sessions_app.site_errors import RateLimited

log = logging.getLogger(__name__)

DAY = 86_400
TABLE = m.RateCounter._meta.db_table

#: count one start in the subject's current window, if the window is below ``limit``: the row's
#: new count, or no row (the limit is reached). One statement: the database's conflict handling
#: serializes concurrent starts on the row, so no race admits one over the limit.
ADMIT = (
    f"INSERT INTO {TABLE} (scope, subject, window_start, n) VALUES (%s, %s, %s, 1) "
    f"ON CONFLICT (scope, subject, window_start) DO UPDATE SET n = {TABLE}.n + 1 "
    f"WHERE {TABLE}.n < %s RETURNING n"
)
#: give back a start that was counted but created nothing (the creation itself was refused)
REFUND = f"UPDATE {TABLE} SET n = n - 1 WHERE scope = %s AND subject = %s AND window_start = %s AND n > 0"
#: windows that ended more than a day ago (the dashboard shows today's peak)
PRUNE = f"DELETE FROM {TABLE} WHERE window_start < %s"
PRUNE_EVERY = 60.0


@dataclass(frozen=True)
class Rate:
    """Turns per window for one scope: the setting naming the limit and the window's length."""

    scope: str
    setting: str
    seconds: int
    per: str  # "minute" | "hour"

    def limit(self) -> int:
        return limit(self.setting)


#: a user's turns from the chat, the API and the websocket (subject: the user's pk)
USER = Rate("user", "JUNE_RATE_TURNS_PER_MINUTE", 60, "minute")
#: an agent's inbound webhook, whoever calls it (subject: the agent)
WEBHOOK = Rate("webhook", "JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE", 60, "minute")
#: one schedule's runs, "Run now" included (subject: its django-q2 name, ``june:<agent>:<name>``)
SCHEDULE = Rate("schedule", "JUNE_RATE_SCHEDULE_TURNS_PER_HOUR", 3600, "hour")
RATES = {r.scope: r for r in (USER, WEBHOOK, SCHEDULE)}


def enabled() -> bool:
    return bool(getattr(settings, "JUNE_RATE_LIMITS", True))


def limit(setting: str) -> int:
    """A limit's value, 0 when off (the setting is 0, or ``JUNE_RATE_LIMITS`` is off)."""
    if not enabled():
        return 0
    return max(0, int(getattr(settings, setting, 0) or 0))


def window_of(rate: Rate, now: float) -> int:
    return int(now // rate.seconds) * rate.seconds


def seconds_left(window_end: float, now: float) -> int:
    return max(1, math.ceil(window_end - now))


# -- rates: one atomic statement -------------------------------------------------------------------


@dataclass(frozen=True)
class Admitted:
    """A start counted in its window (``refund`` gives it back when nothing was created)."""

    rate: Rate | None = None
    subject: str = ""
    window: int = 0

    def refund(self) -> None:
        """Never raises: on a broken transaction the caller's error is the one to see (the
        start then stays counted, as if its turn had been created)."""
        if self.rate is None:
            return
        try:
            with connection.cursor() as cur:
                cur.execute(REFUND, [self.rate.scope, self.subject, self.window])
        except Exception:
            log.warning("could not give back a counted start of %s %s", self.rate.scope, self.subject, exc_info=True)


NOT_COUNTED = Admitted()
_pruned = {"at": 0.0}
_prune_lock = threading.Lock()


def admit(
    rate: Rate, subject: str, *, cap: int | None = None, now: float | None = None, what: str = "turns"
) -> Admitted:
    """Count one start of ``subject`` in ``rate``'s current window, or raise ``RateLimited``
    (nothing counted) when the window already holds the limit (``cap``, else the setting)."""
    cap = rate.limit() if cap is None else cap
    if not cap:
        return NOT_COUNTED
    now = time.time() if now is None else now
    window = window_of(rate, now)
    with connection.cursor() as cur:
        cur.execute(ADMIT, [rate.scope, subject, window, cap])
        row = cur.fetchone()
    if row is None:
        wait = seconds_left(window + rate.seconds, now)
        raise RateLimited(
            # a person reads it: the setting is in `limit`, the wait in retry_after
            f"too many {what}: the limit is {cap} {'an' if rate.per == 'hour' else 'a'} {rate.per}",
            retry_after=wait,
            limit=rate.setting,
        )
    if row[0] == 1:
        _prune(now)
    return Admitted(rate, subject, window)


def _prune(now: float) -> None:
    """Delete windows of more than a day ago, at most once a minute per process (a new window
    opening is the moment: this costs nothing on the starts in between)."""
    with _prune_lock:
        if now - _pruned["at"] < PRUNE_EVERY:
            return
        _pruned["at"] = now
    with connection.cursor() as cur:
        cur.execute(PRUNE, [int(now) - DAY - 3600])


# -- quotas: tokens per day, from recorded usage -----------------------------------------------------


def day_start(now: float) -> int:
    return int(now // DAY) * DAY


def tokens_sum(*paths: str) -> Any:
    total: Any = Value(0)
    for path in paths:
        total = total + Coalesce(Cast(KT(path), BigIntegerField()), Value(0))
    return Sum(total)


#: a turn's own model calls, and its subagents' (``usage.children``): what a user's tree spent
TREE_TOKENS = (
    "usage__input_tokens",
    "usage__output_tokens",
    "usage__children__input_tokens",
    "usage__children__output_tokens",
)
OWN_TOKENS = TREE_TOKENS[:2]


def day_began(now: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(day_start(now), tz=dt.UTC)


#: (subject) -> (read at, tokens): a day's total is a sum over the day's turns, so a process
#: reuses it for ``JUNE_QUOTA_CACHE_SECONDS`` (a sum grows with the day's turns; a quota of a day
#: does not need the last seconds' spend)
_read: dict[tuple[str, Any], tuple[float, int]] = {}
CACHE_ENTRIES = 10_000


def _cached(key: tuple[str, Any], now: float, read: Any) -> Any:
    ttl = float(getattr(settings, "JUNE_QUOTA_CACHE_SECONDS", 0) or 0)
    hit = _read.get(key)
    if ttl > 0 and hit is not None and now - hit[0] < ttl and day_start(hit[0]) == day_start(now):
        return hit[1]
    value = read()
    if len(_read) >= CACHE_ENTRIES:
        _read.clear()
    _read[key] = (now, value)
    return value


def user_tokens_today(user_id: Any, *, now: float | None = None) -> int:
    """Input and output tokens of the turns ``user_id`` started today (UTC), subagents included."""
    now = time.time() if now is None else now
    qs = m.Turn.objects.filter(created_by_id=user_id, created_at__gte=day_began(now))
    return _cached(("user", user_id), now, lambda: int(qs.aggregate(n=tokens_sum(*TREE_TOKENS))["n"] or 0))


def agent_tokens_today(agent: str, *, now: float | None = None) -> int:
    """Input and output tokens of the agent's own model calls today (UTC), every source."""
    now = time.time() if now is None else now
    qs = m.Turn.objects.filter(created_at__gte=day_began(now), session__agent=agent)
    return _cached(("agent", agent), now, lambda: int(qs.aggregate(n=tokens_sum(*OWN_TOKENS))["n"] or 0))


def check_tokens(*, agent: str, user_id: Any = None, user_cap: int | None = None, now: float | None = None) -> None:
    """RateLimited when the user's (``user_cap``: their own quota, else the setting) or the
    agent's tokens of today reached their quota."""
    now = time.time() if now is None else now
    wait = seconds_left(day_start(now) + DAY, now)
    cap = limit("JUNE_QUOTA_TOKENS_PER_DAY") if user_cap is None else user_cap
    if cap and user_id is not None and (spent := user_tokens_today(user_id, now=now)) >= cap:
        raise RateLimited(
            f"your token quota for today is spent ({spent:,} of {cap:,} tokens); it renews at 00:00 UTC",
            retry_after=wait,
            limit="JUNE_QUOTA_TOKENS_PER_DAY",
        )
    cap = limit("JUNE_QUOTA_AGENT_TOKENS_PER_DAY")
    if cap and (spent := agent_tokens_today(agent, now=now)) >= cap:
        raise RateLimited(
            f"agent {agent!r} spent its token quota for today ({spent:,} of {cap:,} tokens); it renews at 00:00 UTC",
            retry_after=wait,
            limit="JUNE_QUOTA_AGENT_TOKENS_PER_DAY",
        )


# -- a user's or a group's own limits (the admin's QuotaOverride) ------------------------------------------


@dataclass(frozen=True)
class Limits:
    """A user's own limits: None where the setting applies, 0 for no limit."""

    turns_per_minute: int | None = None
    tokens_per_day: int | None = None


def resolve(own: Limits | None, groups: list[Limits]) -> Limits:
    """A user's limits from their own override and their groups': per limit, their own value if
    set, else the most generous of their groups' (0, no limit, is the most generous), else None."""

    def pick(name: str) -> int | None:
        mine = getattr(own, name) if own is not None else None
        if mine is not None:
            return mine
        values = [v for g in groups if (v := getattr(g, name)) is not None]
        if not values:
            return None
        return 0 if 0 in values else max(values)

    return Limits(pick("turns_per_minute"), pick("tokens_per_day"))


def limits_of_users(user_ids: list[Any]) -> dict[Any, Limits]:
    """Each user's limits (``resolve``) in two queries; off (0) when ``JUNE_RATE_LIMITS`` is."""
    if not enabled():
        return {uid: Limits(0, 0) for uid in user_ids}
    rows = list(m.QuotaOverride.objects.values_list("user_id", "group_id", "turns_per_minute", "tokens_per_day"))
    if not rows:
        return {uid: Limits() for uid in user_ids}
    own = {u: Limits(t, k) for u, g, t, k in rows if u is not None}
    by_group = {g: Limits(t, k) for u, g, t, k in rows if g is not None}
    # the membership table names its user column after the user model (``member_id`` for a Member)
    field = m.QuotaOverride._meta.get_field("user").related_model._meta.get_field("groups")
    member, user_col = field.remote_field.through, f"{field.m2m_field_name()}_id"
    groups: dict[Any, list[Limits]] = {}
    for uid, gid in member.objects.filter(**{f"{user_col}__in": user_ids, "group_id__in": list(by_group)}).values_list(
        user_col, "group_id"
    ):
        groups.setdefault(uid, []).append(by_group[gid])
    return {uid: resolve(own.get(uid), groups.get(uid, [])) for uid in user_ids}


def user_limits(user_id: Any, *, now: float | None = None) -> Limits:
    """``user_id``'s limits, reused by a process for ``JUNE_QUOTA_CACHE_SECONDS`` (an edit in the
    admin applies within that)."""
    now = time.time() if now is None else now
    return _cached(("limits", user_id), now, lambda: limits_of_users([user_id])[user_id])


# -- admission of a new turn -------------------------------------------------------------------------


def admit_turn(
    *, agent: str, user_id: Any = None, source: str = "web", schedule: str | None = None, now: float | None = None
) -> Admitted:
    """Admit a new turn (token quotas first: reads; then the rate: the one counting write), or
    raise ``RateLimited`` having counted nothing. The rate is the user's for a user's turn, the
    agent's webhook's for a webhook turn, the schedule's for a schedule's run; other turns
    (the command line, a program without a user) count toward the agent's quota only."""
    now = time.time() if now is None else now
    own = user_limits(user_id, now=now) if user_id is not None else Limits()
    check_tokens(agent=agent, user_id=user_id, user_cap=own.tokens_per_day, now=now)
    if user_id is not None:
        return admit(USER, str(user_id), cap=own.turns_per_minute, now=now)
    if schedule is not None:
        return admit(SCHEDULE, schedule, now=now)
    if source == "webhook":
        return admit(WEBHOOK, agent, now=now)
    return NOT_COUNTED


def admit_reset(*, user_id: Any, now: float | None = None) -> Admitted:
    """Admit a user's reset (a new generation, and the session if it is new): it counts in the
    same window as the user's turns, or raises ``RateLimited`` having counted nothing."""
    own = user_limits(user_id, now=now)
    return admit(USER, str(user_id), cap=own.turns_per_minute, now=now, what="turns and resets")
