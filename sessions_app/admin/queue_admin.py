"""django-q2's own admin pages (Scheduled tasks, Successful and Failed tasks, Queued tasks) with
their times in the one format, with the zone (``sessions_app.times``), as every other page of the
console shows them: django-q2 lists ``started``, ``stopped``, ``next_run`` and a queued task's
``lock`` as Django formats a datetime ("Dec. 6, 2026, 9 a.m.", no zone). Its ModelAdmins are kept
(their columns, filters, actions, querysets): each is registered again as a subclass whose time
columns are ``time_column``'s and whose read-only times are ``ZonedTimes``'s (and whose actions
answer a forged selection with a message, ``CheckedModelAdmin``).

django-q2's admin module is imported here, so it has registered its pages whatever the order of
``INSTALLED_APPS``; a page it did not register (Queued tasks without the ORM broker) stays away.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django_q import admin as q_admin
from django_q.models import Failure, OrmQ, Schedule, Success

from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.times import ZonedTimes, time_column

#: each page's time columns
TIMES = {"started": "started", "stopped": "stopped", "next_run": "next run", "lock": "lock"}


def zoned_columns(columns: Any) -> tuple[Any, ...]:
    return tuple(time_column(c, TIMES[c]) if isinstance(c, str) and c in TIMES else c for c in columns)


def zoned(base: type) -> type:
    """``base`` (a django-q2 ModelAdmin) with its times in the one format."""
    return type(
        base.__name__,
        (ZonedTimes, CheckedModelAdmin, base),
        {"list_display": zoned_columns(base.list_display), "__module__": __name__},
    )


def install(site: Any = admin.site) -> None:
    pages = ((Success, q_admin.TaskAdmin), (Failure, q_admin.FailAdmin), (Schedule, q_admin.ScheduleAdmin))
    for model, base in (*pages, (OrmQ, q_admin.QueueAdmin)):
        if site.is_registered(model) and type(site._registry[model]) is base:
            site.unregister(model)
            site.register(model, zoned(base))


install()
