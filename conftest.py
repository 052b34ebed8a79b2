"""Test-process defaults, set before Django's settings load, and no process left behind."""

import os
import secrets
import sys

os.environ.setdefault("SECRET_KEY", "june-test-secret-key")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
os.environ.setdefault("JUNE_DEMO_DELAY", "0")
# a run's own keys in a shared Redis: every run's sessions are numbered from 1, so two runs on
# one Redis (or a killed run's workers) would otherwise hear each other's groups. The processes
# a test starts read it from the environment; this one's settings were loaded before this file
# (pytest-django reads them first), so its layer is told here, before any layer exists.
os.environ.setdefault("JUNE_CHANNEL_PREFIX", f"june-test-{secrets.token_hex(4)}")
# pytest-xdist's workers inherit the controller's environment: each gets keys of its own
_xdist = os.environ.get("PYTEST_XDIST_WORKER")
if _xdist and not os.environ["JUNE_CHANNEL_PREFIX"].endswith(f"-{_xdist}"):
    os.environ["JUNE_CHANNEL_PREFIX"] += f"-{_xdist}"
if os.environ.get("DJANGO_SETTINGS_MODULE"):
    from django.conf import settings

    for _layer in settings.CHANNEL_LAYERS.values():
        if _layer["BACKEND"].startswith("channels_redis"):
            _layer.setdefault("CONFIG", {})["prefix"] = os.environ["JUNE_CHANNEL_PREFIX"]
    # users' passwords hashed quickly in this process (tests/fasthash.py), checked anywhere
    settings.PASSWORD_HASHERS = ["tests.fasthash.FewRoundsPBKDF2", *settings.PASSWORD_HASHERS]
# every process a test starts (workers, daphne) inherits this run's mark (tests/reaper.py)
os.environ["JUNE_TEST_RUN"] = str(os.getpid())


def pytest_sessionstart(session):
    from tests import reaper

    reaper.reap(reaper.orphans())


def pytest_unconfigure(config):
    from tests import reaper

    reaper.reap(reaper.of_run(os.getpid()))


def _delete_flush() -> None:
    """pytest-django empties the database after each transactional test with Django's flush,
    on PostgreSQL one ``TRUNCATE`` of every table: about 0.9 s here (a new file per table),
    ~300 times a run. ``DELETE FROM`` each table, in the flush's one transaction, leaves the same
    empty tables in a few milliseconds (Django's foreign keys are deferred to the commit, so the
    order does not matter). Sequences are kept, as the flush keeps them unless asked. The audit
    log's trigger refuses a DELETE unless ``june.audit_purge_before`` allows it (``audit_purge``):
    the flush allows every row, for its own transaction."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        allow = "SELECT set_config('june.audit_purge_before', 'infinity', true);"
        return [allow] + [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};" for t in tables]

    DatabaseOperations.sql_flush = sql_flush


if os.environ.get("DJANGO_SETTINGS_MODULE"):
    _delete_flush()

# schemathesis' pytest plugin imports its report writers at the session's end, through pytest's
# assertion rewriting (``ast.parse``). On CPython 3.11 the AST constructor's recursion count is
# shared by threads and leaks on an error path (python/cpython#106905), so that late parse failed
# once with "SystemError: AST constructor recursion depth mismatch" after every test had passed.
# Imported here, at start-up, one thread: nothing is left to parse at the end.
# A module whose import fails is not kept, so it is parsed again at every attempt: allure is
# optional, and without it ``schemathesis.reporting.allure`` was parsed again at the end and the
# error came back (CI, 2026-12-06). ``None`` in ``sys.modules`` makes that import fail at once.
for _late in ("schemathesis.reporting.html.writer", "schemathesis.reporting.junitxml", "schemathesis.reporting.allure"):
    try:
        __import__(_late)
    except ImportError:  # allure is optional; schemathesis itself comes with the test extras
        sys.modules[_late] = None  # type: ignore[assignment]
