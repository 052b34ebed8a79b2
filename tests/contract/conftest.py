"""Fixtures of the contract suites."""

from __future__ import annotations

import pytest


@pytest.fixture
def runner_store():
    """The store of a worker's runner (sessions_app.workers.runner): on PostgreSQL its units go
    through pipes, and its thread path is a pool of threads with connections of their own."""
    from sessions_app.store import DjangoSessionStore, Threads
    from sessions_app.store.pipes import Pipes
    from tests.conftest import is_postgres

    pipes = Pipes(2) if is_postgres() else None
    threads = Threads(3)
    yield DjangoSessionStore(pipes=pipes, threads=threads)
    if pipes is not None:
        pipes.close()
    threads.close_connections()
    threads.shutdown()
