"""Human in the loop with real django-q2 workers: a refund parks on a worker, every worker is
killed, a new cluster starts, and an operator answers from the admin; the turn completes on
the new worker. Refused answers (403/409/422/500) leave the turn parked and answerable and
enqueue nothing.

The clusters are ``manage.py qcluster`` subprocesses, each in its own process group, pointed
at this test's database (the SQLite test file, or test_<name> on PostgreSQL)."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django_q.models import OrmQ

from agents_app.models import Refund
from sessions_app import models as m
from sessions_app import services, wiring
from tests.fault.qcluster import Clusters, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 90.0  # a loaded 2-core machine: generous, and only ever polled


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture
def clusters(tmp_path):
    """Real qclusters on this test's database (tests/fault/qcluster.py), the demo model only."""
    manager = Clusters(tmp_path, JUNE_MODEL="demo", JUNE_DEMO_DELAY="0")
    yield manager
    manager.stop_all()
    from django.db import connections

    connections.close_all()


def kill_every_worker(cluster) -> None:
    """SIGKILL the cluster's process group and wait until none of its processes is left."""
    cluster.kill()
    wait_for(lambda: not _group_alive(cluster.pid), timeout=DEADLINE, what="the killed cluster's processes to go")


@pytest.fixture
def users():
    make = get_user_model().objects.create_user
    olga = make("olga", password="pw-olga-123", is_staff=True)
    olga.groups.add(Group.objects.create(name="operators"))
    return {
        "alice": make("alice", password="pw-alice-123"),
        "olga": olga,
        "sam": make("sam", password="pw-sam-123", is_staff=True),
    }


def status_of(turn_id: str) -> str:
    return m.Turn.objects.values_list("status", flat=True).get(pk=turn_id)


def logged_in(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_a_parked_refund_survives_killing_every_worker_and_is_answered_from_the_admin(clusters, users, monkeypatch):
    first = clusters.start()
    rec = services.turn_start(agent="ops", key="refund-1", text="refund order 7 25", user=users["alice"])
    wait_for(lambda: status_of(rec.turn_id) == "suspended", timeout=DEADLINE, what="the refund to park on a worker")
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.pending["call"]["name"] == "issue_refund" and turn.pending["call"]["input"] == {
        "order_id": "7",
        "amount": 25,
    }
    # parked holds nothing in memory and owes the queue nothing: the task is acknowledged
    wait_for(lambda: not OrmQ.objects.exists(), timeout=DEADLINE, what="the parking task to be acknowledged")

    assert first.alive(), "the first cluster died on its own"
    kill_every_worker(first)
    clusters.start()  # a new cluster: the only thing that can run the resumed turn
    url = reverse("admin:sessions_app_approvalrequest_change", args=(rec.turn_id,))
    approve = {"input_id": "approve-refund", "decision": "approve"}

    def assert_parked_and_nothing_queued():
        t = m.Turn.objects.get(pk=rec.turn_id)
        assert t.status == "suspended" and t.pending["request"]["id"] == "approve-refund"
        assert not m.Answer.objects.filter(turn=t).exists() and not OrmQ.objects.exists()
        assert not Refund.objects.exists()

    # 403: a staff user who is not an operator
    assert logged_in(users["sam"]).post(url, approve).status_code == 403
    assert_parked_and_nothing_queued()
    operator = logged_in(users["olga"])
    # 409: a wrong input id
    assert operator.post(url, {**approve, "input_id": "approve-other"}).status_code == 409
    assert_parked_and_nothing_queued()
    # 422: not an answer the form/schema accepts
    assert operator.post(url, {**approve, "decision": "perhaps"}).status_code == 422
    assert_parked_and_nothing_queued()
    # 500: the agent's authorize_answer raises; nothing applied, the same answer is retried below
    agent = wiring.agent("ops")
    good = agent.authorize_answer

    def broken(**kwargs):
        raise ConnectionError("directory down")

    monkeypatch.setattr(agent, "authorize_answer", broken)
    assert operator.post(url, approve).status_code == 500
    assert_parked_and_nothing_queued()
    monkeypatch.setattr(agent, "authorize_answer", good)

    assert operator.post(url, approve).status_code == 302
    wait_for(
        lambda: status_of(rec.turn_id) in ("completed", "failed"),
        timeout=DEADLINE,
        what="the resumed turn to finish on the new worker",
    )
    turn.refresh_from_db()
    assert turn.status == "completed", turn.error
    assert "refund" in turn.text.lower()
    refund = Refund.objects.get()
    assert (refund.order_ref, float(refund.amount)) == ("7", 25.0)
    answer = m.Answer.objects.get(turn=turn)
    assert (answer.user, answer.via, answer.answer, answer.remote_addr) == (users["olga"], "admin", True, "127.0.0.1")
    types = list(m.Event.objects.filter(turn_id=turn.pk).order_by("seq").values_list("type", flat=True))
    assert types.count("input.requested") == 1 and types[-1] == "turn.completed"
    assert types.index("input.answered") > types.index("input.requested")
