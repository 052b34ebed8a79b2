"""Human in the loop with real django-q2 workers: a refund parks on a worker, every worker is
killed, a new cluster starts, and an operator answers from the admin; the turn completes on
the new worker. Refused answers (403/409/422/500) leave the turn parked and answerable and
enqueue nothing.

The clusters are ``manage.py qcluster`` subprocesses, each in its own process group, pointed
at this test's database (the SQLite test file, or test_<name> on PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.urls import reverse
from django_q.models import OrmQ

from agents_app.models import Refund
from sessions_app import engine, services
from sessions_app import models as m

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 90.0  # a loaded 2-core machine: generous, and only ever polled


def test_database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + db["NAME"]))


test_database_url.__test__ = False  # a helper, not a test


class Cluster:
    """One ``qcluster`` in its own process group (so SIGKILL reaches its forked workers)."""

    def __init__(self, log_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
        env.update(DATABASE_URL=test_database_url(), JUNE_Q_SYNC="0", JUNE_Q_WORKERS="1", JUNE_Q_POLL="0.1",
                   JUNE_DEMO_DELAY="0", SECRET_KEY=settings.SECRET_KEY, JUNE_Q_NAME=settings.Q_CLUSTER["name"],
                   DJANGO_SETTINGS_MODULE="june_project.settings")
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole group and wait until no process of it is left."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=DEADLINE)
        wait_for(lambda: not _group_alive(self.proc.pid), "the killed cluster's processes to go")
        self.log.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for(check, what: str):
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)  # polling a condition, not waiting for time to pass
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def clusters(tmp_path):
    started: list[Cluster] = []

    def start() -> Cluster:
        c = Cluster(tmp_path / f"qcluster-{len(started)}.log")
        started.append(c)
        return c

    yield start
    for c in started:
        if c.proc.poll() is None or _group_alive(c.proc.pid):
            c.kill()
    from django.db import connections

    connections.close_all()


@pytest.fixture
def users():
    make = get_user_model().objects.create_user
    olga = make("olga", password="pw-olga-123", is_staff=True)
    olga.groups.add(Group.objects.create(name="operators"))
    return {"alice": make("alice", password="pw-alice-123"), "olga": olga,
            "sam": make("sam", password="pw-sam-123", is_staff=True)}


def status_of(turn_id: str) -> str:
    return m.Turn.objects.values_list("status", flat=True).get(pk=turn_id)


def logged_in(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_a_parked_refund_survives_killing_every_worker_and_is_answered_from_the_admin(clusters, users, monkeypatch):
    first = clusters()
    rec = services.turn_start(agent="ops", key="refund-1", text="refund order 7 25", user=users["alice"])
    wait_for(lambda: status_of(rec.turn_id) == "suspended", "the refund to park on a worker")
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.pending["call"]["name"] == "issue_refund" and turn.pending["call"]["input"] == {"order_id": "7", "amount": 25}
    # parked holds nothing in memory and owes the queue nothing: the task is acknowledged
    wait_for(lambda: not OrmQ.objects.exists(), "the parking task to be acknowledged")

    assert first.proc.poll() is None, "the first cluster died on its own"
    first.kill()
    clusters()  # a new cluster: the only thing that can run the resumed turn
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
    agent = engine.agent("ops")
    good = agent.authorize_answer

    def broken(**kwargs):
        raise ConnectionError("directory down")

    monkeypatch.setattr(agent, "authorize_answer", broken)
    assert operator.post(url, approve).status_code == 500
    assert_parked_and_nothing_queued()
    monkeypatch.setattr(agent, "authorize_answer", good)

    assert operator.post(url, approve).status_code == 302
    wait_for(lambda: status_of(rec.turn_id) in ("completed", "failed"), "the resumed turn to finish on the new worker")
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
