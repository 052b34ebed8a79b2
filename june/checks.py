"""Django system checks of a project's June settings (``manage.py check``, and every command that
runs the checks: ``migrate``, ``runserver``…), registered by ``sessions_app`` when it loads.

A ``JUNE_*`` setting June does not read changes nothing: a misspelt name (``JUNE_RATE_TURN_PER_MINUTE
= 5``) left the limit at its default without a word. Each such name is a warning that names the
setting it most resembles; so is a ``JUNE_*`` environment variable June does not read that
looks like one it does (``JUNE_DEMO_ESAY_DELAY=5 python3 dev.py run``)."""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.core import checks

from june.settings import june_settings, misspelt_env


def unknown_june_settings(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    known = set(june_settings({}))
    found = []
    for name in sorted(n for n in dir(settings) if n.startswith("JUNE_") and n not in known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f"Did you mean {close[0]}?" if close else "june/settings.py lists every JUNE_* setting."
        found.append(checks.Warning(f"{name} is not a June setting: it changes nothing.", hint=hint, id="june.W001"))
    for name, close in misspelt_env():
        found.append(
            checks.Warning(
                f"the environment variable {name} is read by nothing: it changes nothing.",
                hint=f"Did you mean {close}?",
                id="june.W002",
            )
        )
    return found
