"""``june.settings.june_settings``: the JUNE_* values read from the environment, and the ones it
refuses (a project's settings fail at start, not a worker at its first turn)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from june.settings import june_settings


def test_the_runners_event_loop_is_uvloop_by_default_and_may_be_asyncio():
    assert june_settings({})["JUNE_EVENT_LOOP"] == "uvloop"
    assert june_settings({"JUNE_EVENT_LOOP": " AsyncIO "})["JUNE_EVENT_LOOP"] == "asyncio"
    assert june_settings({"JUNE_EVENT_LOOP": ""})["JUNE_EVENT_LOOP"] == "uvloop"


def test_an_unknown_event_loop_is_refused_by_name():
    with pytest.raises(ImproperlyConfigured, match="JUNE_EVENT_LOOP must be 'uvloop' or 'asyncio', not 'trio'"):
        june_settings({"JUNE_EVENT_LOOP": "trio"})


def test_the_runners_busy_lag_has_a_default_and_refuses_nonsense():
    defaults = june_settings({})
    assert defaults["JUNE_RUNNER_BUSY_LAG"] == 0.02
    assert "JUNE_ADMISSION_BACKLOG" not in defaults  # the door is gone (issue 59): a 202 at once
    assert june_settings({"JUNE_RUNNER_BUSY_LAG": "0"})["JUNE_RUNNER_BUSY_LAG"] == 0
    with pytest.raises(ImproperlyConfigured, match="JUNE_RUNNER_BUSY_LAG must be >= 0"):
        june_settings({"JUNE_RUNNER_BUSY_LAG": "-0.5"})
