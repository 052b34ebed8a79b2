"""The engine's branch scenarios (tests/unit/test_branches.py) on the Django store of this run's
database: a scripted model asserts that a fork's model context is exactly its branch, after a
compaction too, and that a busy session refuses forks and switches."""

from __future__ import annotations

import pytest

from tests.unit.test_branches import (  # noqa: F401 (collected here, on this store)
    test_a_fork_after_a_compaction_sends_the_summary_and_the_kept_tail,
    test_fork_and_switch_refuse_a_busy_session,
    test_regenerate_sends_the_last_message_again_without_its_reply,
    test_the_model_of_a_fork_sees_its_branch_and_nothing_of_the_one_left,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def branch_store():
    from sessions_app.store import DjangoSessionStore

    return DjangoSessionStore()


async def test_the_scenarios_here_run_on_the_django_store(branch_store):
    from asgiref.sync import sync_to_async

    from sessions_app import models as m
    from sessions_app.store import DjangoSessionStore

    assert isinstance(branch_store, DjangoSessionStore)
    await test_regenerate_sends_the_last_message_again_without_its_reply(branch_store)
    assert await sync_to_async(m.Branch.objects.filter(session__key="s1").count)() == 2
