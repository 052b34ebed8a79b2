"""Shared fixtures. The backends come from the environment (DATABASE_URL, REDIS_URL), and
JUNE_REQUIRE_POSTGRES / JUNE_REQUIRE_REDIS make a run fail, not skip, when one is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: whole suites ``python3 dev.py test`` leaves to ``--slow`` (CI runs both): real Chromium,
#: processes killed at every boundary, hostile fuzzing. Single slow tests elsewhere carry
#: ``@pytest.mark.slow`` themselves.
SLOW_SUITES = ("browser", "fault", "hostile")
TESTS = Path(__file__).resolve().parent
#: a host project with a test suite of its own (run as its team runs it: tests/integration/test_hostproject_suite.py)
collect_ignore = ["hostproject"]


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        if parts and parts[0] in SLOW_SUITES:
            item.add_marker(pytest.mark.slow)


def pytest_report_header(config):
    from django.conf import settings

    db = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    return f"june: database={db} channel_layer={layer}"


@pytest.fixture(scope="session", autouse=True)
def _required_backends():
    """CI runs the suite once on SQLite and once on PostgreSQL + Redis: never silently on less."""
    from django.conf import settings

    if os.environ.get("JUNE_REQUIRE_POSTGRES") == "1":
        assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql", "PostgreSQL required"
    if os.environ.get("JUNE_REQUIRE_REDIS") == "1":
        assert "redis" in settings.CHANNEL_LAYERS["default"]["BACKEND"].lower(), "Redis channel layer required"
    yield


@pytest.fixture(autouse=True)
def _redis_layer_per_test():
    """Each test runs on an event loop of its own, and a channels_redis layer keeps asyncio locks
    per channel prefix across loops: one still held when a test's loop closed mid-receive fails
    every later receive of the process ("bound to a different event loop"), and the consumers of
    the tests after it with it. A test gets its layer new, as a process (one loop) does."""
    from channels.layers import channel_layers

    for alias, layer in list(channel_layers.backends.items()):
        if type(layer).__module__.startswith("channels_redis"):
            del channel_layers.backends[alias]
    yield


@pytest.fixture
async def settled():
    """For an asyncio test that opens websockets: what it left running on its loop (a consumer,
    the origin check's denier, their channel layer's receives) is stopped before the loop closes,
    cancelled again while it outlives a cancellation (``tests.settle``). Redis-py can swallow one
    inside BZPOPMIN: the loop's close then waits on it for good (PostgreSQL + Redis runs hung
    300 s in the teardowns of ``test_websocket_paths_that_match_no_route_close_instead_of_a_500``
    and ``test_anonymous_is_refused``)."""
    yield
    from tests.settle import settle_tasks

    await settle_tasks()


def is_postgres() -> bool:
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


@pytest.fixture(autouse=True)
def _close_thread_connections(request):
    """The Django store runs on sync_to_async's worker thread, which keeps its own connection,
    and has connections of its own (sessions_app.store.direct, .lite), as have /readyz's checks
    (their thread: sessions_app.health): close them after each database test so the test
    database can be flushed and dropped."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is None and "transactional_db" not in request.fixturenames:
        return
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    from sessions_app import health
    from sessions_app.store import direct, lite

    async def close() -> None:
        await sync_to_async(connections.close_all)()

    direct.close_all()
    lite.close_all()
    health.probe_thread.submit(connections.close_all).result(timeout=10)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop running here (the usual case): close on the store's thread
        asyncio.run(close())


@pytest.fixture
def fault_agent(settings):
    """The fault-test agent (tests/fault/agents/faultagent), loaded in this process too (the
    qcluster processes of tests/fault/qcluster.py load it from JUNE_AGENT_DIRS)."""
    from sessions_app import wiring
    from tests.fault.qcluster import AGENTS

    settings.JUNE_AGENT_DIRS = [str(AGENTS)]
    wiring.agents.cache_clear()
    yield "faultagent"
    wiring.agents.cache_clear()
