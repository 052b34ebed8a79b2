"""Django system checks of a project's June settings (``manage.py check``, and every command that
runs the checks: ``migrate``, ``runserver``…), registered by ``sessions_app`` when it loads.

A ``JUNE_*`` setting June does not read changes nothing: a misspelt name (``JUNE_RATE_TURN_PER_MINUTE
= 5``) left the limit at its default without a word. Each such name is a warning that names the
setting it most resembles; so is a ``JUNE_*`` environment variable June does not read that
looks like one it does (``JUNE_DEMO_ESAY_DELAY=5 python3 dev.py run``)."""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from django.conf import settings
from django.core import checks

from june.settings import june_environment, june_settings

#: the JUNE_* environment variables read elsewhere than ``june_settings``: ``q_cluster``'s,
#: ``channel_layers``', this repository's site's (june_project/settings.py) and dev.py's
ENV_ELSEWHERE = frozenset(
    {
        *(f"JUNE_Q_{n}" for n in ("WORKERS", "NAME", "TIMEOUT", "RETRY", "MAX_ATTEMPTS", "POLL", "QUEUE_LIMIT")),
        *(f"JUNE_Q_{n}" for n in ("RECYCLE", "SYNC", "BROKER")),
        "JUNE_CHANNEL_PREFIX",
        "JUNE_CORS_ALLOWED_ORIGINS",
        *(f"JUNE_DB_POOL{n}" for n in ("", "_MIN", "_MAX", "_TIMEOUT")),
        "JUNE_SQLITE_PAGE_SIZE",
        "JUNE_HOST",
        "JUNE_PORT",
        "JUNE_TEST_WORKERS",
    }
)
#: per-agent variables: any name after the prefix
ENV_PREFIXES = ("JUNE_WEBHOOK_SECRET_", "JUNE_WEBHOOK_URL_")


def misspelt_env(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The ``JUNE_*`` environment variables June reads under no name that look like a name it
    reads, each with that name: ``JUNE_DEMO_ESAY_DELAY=5`` changed nothing, without a word. A
    name like none of June's (a host's own, a test tool's) is not June's to judge."""
    env = june_environment() if env is None else env
    known = set(june_settings({})) | ENV_ELSEWHERE
    found = []
    for name in sorted(n for n in env if n.startswith("JUNE_") and n not in known and not n.startswith(ENV_PREFIXES)):
        if close := difflib.get_close_matches(name, known, n=1, cutoff=0.88):
            found.append((name, close[0]))
    return found


def unknown_june_settings(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    known = set(june_settings({}))
    found = []
    for name in sorted(n for n in dir(settings) if n.startswith("JUNE_") and n not in known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f"Did you mean {close[0]}?" if close else "june/settings.py lists every JUNE_* setting."
        found.append(checks.Warning(f"{name} is not a June setting: it changes nothing.", hint=hint, id="june.W001"))
    for name, resembled in misspelt_env():
        found.append(
            checks.Warning(
                f"the environment variable {name} is read by nothing: it changes nothing.",
                hint=f"Did you mean {resembled}?",
                id="june.W002",
            )
        )
    return found
