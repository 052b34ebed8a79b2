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


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("JUNE_RATE_TURNS_PER_MINUTE", "abc", "JUNE_RATE_TURNS_PER_MINUTE must be a whole number, not 'abc'"),
        ("JUNE_MAX_BODY_BYTES", "1MB", "JUNE_MAX_BODY_BYTES must be a whole number, not '1MB'"),
        ("JUNE_LEASE_SECONDS", "ten", "JUNE_LEASE_SECONDS must be a number, not 'ten'"),
        ("JUNE_MODEL_PRICES", "{bad", "JUNE_MODEL_PRICES is not valid JSON"),
        ("JUNE_RETENTION", "[30]", r"JUNE_RETENTION must be a JSON object"),
        ("JUNE_RATE_LIMITS", "ture", "JUNE_RATE_LIMITS must be one of 1/0, true/false, yes/no, on/off, not 'ture'"),
        ("JUNE_SQLITE_OPTIONS", "maybe", "JUNE_SQLITE_OPTIONS must be one of"),
        ("JUNE_Q_WORKERS", "two", "JUNE_Q_WORKERS must be a whole number"),
    ],
)
def test_a_mistyped_value_names_its_variable(name, value, said):
    """A typo in a value was a bare ``ValueError: invalid literal for int()`` (or a JSON decoder's
    traceback) from the settings, naming no variable; a boolean's typo was silently false
    (``JUNE_RATE_LIMITS=ture`` turned every rate limit off)."""
    from june.settings import q_cluster

    with pytest.raises(ImproperlyConfigured, match=said):
        q_cluster({name: value}) if name.startswith("JUNE_Q_") else june_settings({name: value})


def test_values_that_parse_still_do():
    got = june_settings({"JUNE_RATE_LIMITS": " Off ", "JUNE_MAX_BODY_BYTES": " 2048 ", "JUNE_DEMO_DELAY": ""})
    assert got["JUNE_RATE_LIMITS"] is False and got["JUNE_MAX_BODY_BYTES"] == 2048 and got["JUNE_DEMO_DELAY"] is None
    assert june_settings({"JUNE_MODEL_PRICES": '{"m": {"input": 1}}'})["JUNE_MODEL_PRICES"] == {"m": {"input": 1}}


@pytest.mark.parametrize(
    "name",
    [
        "JUNE_RATE_TURNS_PER_MINUTE",
        "JUNE_QUOTA_TOKENS_PER_DAY",
        "JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE",
        "JUNE_WS_MAX_PER_USER",
    ],
)
def test_a_negative_limit_is_refused_not_taken_as_off(name):
    """``JUNE_RATE_TURNS_PER_MINUTE=-5`` was read as 0, which turns the limit off."""
    with pytest.raises(ImproperlyConfigured, match=f"{name} must be 0 .off. or more, not -5"):
        june_settings({name: "-5"})


def test_a_misspelt_setting_name_is_a_warning_that_names_the_right_one(settings):
    from june.checks import unknown_june_settings

    settings.JUNE_RATE_TURN_PER_MINUTE = 5
    [warning] = unknown_june_settings(None)
    assert warning.id == "june.W001"
    assert "JUNE_RATE_TURN_PER_MINUTE" in warning.msg and "JUNE_RATE_TURNS_PER_MINUTE" in warning.hint
    del settings.JUNE_RATE_TURN_PER_MINUTE
    assert unknown_june_settings(None) == []


def test_a_misspelt_environment_variable_is_a_warning_that_names_the_right_one(monkeypatch):
    """``JUNE_DEMO_ESAY_DELAY=5 python3 dev.py run`` changed nothing, without a word: only the
    names of settings were checked, and this site (dev.py, june_project) reads the environment."""
    from june.checks import unknown_june_settings

    monkeypatch.setenv("JUNE_DEMO_ESAY_DELAY", "5")
    [warning] = unknown_june_settings(None)
    assert warning.id == "june.W002"
    assert "JUNE_DEMO_ESAY_DELAY" in warning.msg and "JUNE_DEMO_ESSAY_DELAY" in warning.hint
    monkeypatch.delenv("JUNE_DEMO_ESAY_DELAY")
    monkeypatch.setenv("JUNE_WEBHOOK_SECRET_ORDERS", "s3cret")  # a per-agent name: read
    monkeypatch.setenv("JUNE_Q_WORKERS", "2")  # read by q_cluster
    monkeypatch.setenv("JUNE_MY_HOSTS_OWN_THING", "1")  # like none of June's: not June's to judge
    assert unknown_june_settings(None) == []


def test_no_variable_the_repository_names_is_taken_for_a_misspelling():
    """Every ``JUNE_*`` name the code, the tests and the docs use is read somewhere (or is not
    June's): only the docs' own example of a misspelling is one."""
    import re
    from pathlib import Path

    from june.checks import misspelt_env

    root = Path(__file__).resolve().parents[2]
    name = re.compile(r"JUNE_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_<*])")
    names: set[str] = set()
    for folder in ("june", "june_project", "sessions_app", "agents_app", "june_evals", "tests", "docs", "deploy"):
        for path in (root / folder).rglob("*"):
            if (
                path.suffix in (".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".txt")
                and "node_modules" not in path.parts
            ):
                names |= set(name.findall(path.read_text(errors="replace")))
    for extra in ("dev.py", "README.md", "Procfile"):
        names |= set(name.findall((root / extra).read_text()))
    typos = {"JUNE_RATE_TURN_PER_MINUTE", "JUNE_DEMO_ESAY_DELAY"}  # the examples of one
    assert [n for n, _ in misspelt_env(dict.fromkeys(names, "1"))] == sorted(typos & names)
