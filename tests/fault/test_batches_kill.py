"""Message Batches under SIGKILL, on real qclusters and the local Batches peer: a worker killed
between ``create`` and the checkpoint of the batch's id, then one killed between writing the
results and resuming the turn. Exactly one batch is created and the turn settles with its answer,
read once (docs/providers.md "Message Batches")."""

from __future__ import annotations

import pytest

from agents_app.runtime.seams import TurnStatus
from tests.provider.fake_batches_api import FakeBatchesAPI

from .qcluster import AGENTS, BATCH_AGENTS, Clusters, wait_for
from .test_kill import wait_final

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def peer():
    api = FakeBatchesAPI()
    api.start()
    yield api
    api.stop()


@pytest.fixture
def batch_agent(settings):
    """``batchagent`` (tests/fault/batch_agents) beside the fault agents, in this process too."""
    from sessions_app import wiring

    settings.JUNE_AGENT_DIRS = [str(AGENTS), str(BATCH_AGENTS)]
    wiring.agents.cache_clear()
    yield "batchagent"
    wiring.agents.cache_clear()


@pytest.fixture
def batch_clusters(tmp_path, peer, django_db_setup, django_db_blocker):
    manager = Clusters(
        tmp_path,
        JUNE_AGENT_DIRS=f"{AGENTS},{BATCH_AGENTS}",
        ANTHROPIC_API_KEY="sk-test",
        ANTHROPIC_BASE_URL=peer.url,
        JUNE_BATCH_POLL_SECONDS="1",
        JUNE_BATCH_SUBMIT_GRACE="1",
    )
    try:
        yield manager
    finally:
        manager.stop_all()


def test_kills_between_create_and_checkpoint_and_between_results_and_resume(batch_clusters, peer, batch_agent):
    from sessions_app import models as m
    from sessions_app import services

    peer.hold("create")
    first = batch_clusters.start()
    turn_id = services.turn_start(
        agent=batch_agent, key="kill", text="ping", source="webhook", kind="proactive", by="hook:kill"
    ).turn_id
    # the turn parked (its request written first), and the poller's create reached the API
    assert peer.reached("create", timeout=90)
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.SUSPENDED
    first.kill()  # the batch exists at the API; its id was never checkpointed
    peer.release("create")
    (row,) = m.BatchCall.objects.filter(turn_id=turn_id)
    assert row.status == "submitting" and row.batch_id == ""

    second = batch_clusters.start()
    wait_for(lambda: m.BatchCall.objects.get(pk=row.pk).status == "recovering", timeout=60, what="recovery")
    assert m.BatchCall.objects.get(pk=row.pk).candidates == [peer.created[0].id]
    peer.end()
    # the results written: killed before the next pass resumes the turn
    wait_for(lambda: m.BatchCall.objects.get(pk=row.pk).status == "done", timeout=60, what="the results")
    second.kill()
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.SUSPENDED
    assert not m.BatchCall.objects.get(pk=row.pk).delivered

    batch_clusters.start()
    assert wait_final(turn_id) == TurnStatus.COMPLETED
    done = m.Turn.objects.get(pk=turn_id)
    assert done.text == "answer: ping"
    assert done.usage["served_by"] == ["anthropic-batch:claude-sonnet-4-6"]
    assert len(peer.created) == 1 and peer.custom_ids() == [row.custom_id]  # exactly one create
    assert peer.results_read == 1  # the answer was kept, not read again
