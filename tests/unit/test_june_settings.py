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


def test_admission_and_the_runners_busy_lag_have_defaults_and_refuse_nonsense():
    defaults = june_settings({})
    assert defaults["JUNE_ADMISSION_BACKLOG"] == 20 and defaults["JUNE_ADMISSION_WAIT"] == 30.0
    assert defaults["JUNE_RUNNER_BUSY_LAG"] == 0.02
    assert june_settings({"JUNE_ADMISSION_BACKLOG": "0", "JUNE_RUNNER_BUSY_LAG": "0"})["JUNE_ADMISSION_BACKLOG"] == 0
    for bad in (
        {"JUNE_ADMISSION_BACKLOG": "-1"},
        {"JUNE_ADMISSION_WAIT": "0"},
        {"JUNE_ADMISSION_WAIT": "nan"},
        {"JUNE_RUNNER_BUSY_LAG": "-0.5"},
    ):
        with pytest.raises(ImproperlyConfigured, match="JUNE_ADMISSION_BACKLOG and JUNE_RUNNER_BUSY_LAG"):
            june_settings(bad)
