"""The HTTP API's server-sent events against a real daphne and a real qcluster (subprocesses on
this test's database; the channel layer of the run: Redis, or the server-less unix-socket one).

A turn streams in order and ends at its terminal event; ``Last-Event-ID`` reconnects miss and
repeat nothing; ``?after=`` starts after a seq; a live stream sees a turn started after it
opened, and a cancel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from sessions_app import models as m
from tests.fault.qcluster import database_url, free_port

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 90.0  # a loaded 2-core machine: generous, and only ever polled
BASE = "/api/agents/ops/sessions"
DELTAS = {"message.delta", "reasoning.delta"}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """daphne + a worker (june_worker) on the test database; yields the base URL."""
    logs = tmp_path_factory.mktemp("api-sse")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
    env.update(
        DATABASE_URL=database_url(),
        JUNE_Q_SYNC="0",
        JUNE_Q_WORKERS="1",
        JUNE_Q_POLL="0.05",
        JUNE_DEMO_DELAY="0",
        SECRET_KEY=settings.SECRET_KEY,
        JUNE_Q_NAME=settings.Q_CLUSTER["name"],
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
    )
    port = free_port()
    procs = []
    for name, cmd in (
        (
            "daphne",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        ),
        ("qcluster", [sys.executable, "manage.py", "june_worker"]),
    ):  # stops at once
        log = open(logs / f"{name}.log", "wb")
        procs.append(
            subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            try:
                if httpx.get(url + "/api/openapi.json", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (logs / "daphne.log").read_text()
            assert procs[0].poll() is None, (logs / "daphne.log").read_text()
            time.sleep(0.2)  # polling for the server to listen
        yield url
    finally:
        for proc in procs:
            _stop(proc)


@pytest.fixture
def http(server, django_user_model):
    user = django_user_model.objects.create_user("alice", password="pw-alice-123")
    token = m.ApiToken.issue(user)[1]
    with httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(DEADLINE)
    ) as client:
        yield client


def read_sse(response: httpx.Response, *, stop=None) -> list[dict]:
    """Parse an SSE stream into [{"id", "event", "data"}] until it ends (or ``stop(event)``)."""
    import json

    out: list[dict] = []
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                seq = fields.get("id")
                out.append(
                    {
                        "id": int(seq) if seq is not None else None,
                        "event": fields.get("event"),
                        "data": json.loads(fields["data"]),
                    }
                )
                if stop is not None and stop(out[-1]):
                    return out
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    return out


def logged(key: str) -> list[tuple[int, str]]:
    return list(m.Event.objects.filter(session__key=key).order_by("seq").values_list("seq", "type"))


def committed(events: list[dict]) -> list[dict]:
    return [e for e in events if e["id"] is not None]


def test_a_turn_streams_in_order_and_ends_at_its_terminal_event(http):
    with http.stream(
        "POST", f"{BASE}/s1/turns", json={"text": "order blue mugs"}, headers={"Accept": "text/event-stream"}
    ) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        turn_id = response.headers["X-June-Turn-Id"]
        events = read_sse(response)  # returns only because the server ended the stream
    done = committed(events)
    assert [e["event"] for e in done] == [
        "turn.started",
        "message.completed",
        "action.requested",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    assert [(e["id"], e["event"]) for e in done] == logged("s1")  # the ids are the log's seqs
    assert all(e["data"]["turn_id"] == turn_id and e["data"]["type"] == e["event"] for e in events)
    # deltas carry no id (an instant model may commit a message before its deltas get out:
    # those are dropped as stale; the slow essay below proves deltas stream live)
    assert events[0]["event"] == "turn.queued" and events[0]["id"] is None  # first, at once, not logged
    assert all(e["data"]["at"] for e in [events[0], *done])  # when each was committed
    assert {e["event"] for e in events[1:] if e["id"] is None} <= DELTAS
    assert done[-1]["data"]["text"].startswith("Done. create_order")
    assert m.Turn.objects.get(pk=turn_id).status == "completed"


def test_a_parked_turn_streams_until_input_requested(http):
    with http.stream(
        "POST", f"{BASE}/r1/turns", json={"text": "refund order 42 10"}, headers={"Accept": "text/event-stream"}
    ) as response:
        events = committed(read_sse(response))
    assert events[-1]["event"] == "input.requested"
    assert events[-1]["data"]["request"]["id"] == "approve-refund"
    turn = http.get(f"{BASE}/r1/turns/{events[-1]['data']['turn_id']}").json()
    assert turn["status"] == "suspended" and turn["pending"]["id"] == "approve-refund"


def test_last_event_id_reconnects_miss_and_repeat_nothing(http):
    first = http.post(f"{BASE}/s2/turns?wait=false", json={"text": "order red mugs"}).json()
    # connection 1 drops after three events (as a client whose network went away would)
    with http.stream("GET", f"{BASE}/s2/events?limit=3") as response:
        part1 = committed(read_sse(response))
    assert len(part1) == 3
    second = http.post(f"{BASE}/s2/turns?wait=false", json={"text": "stock mugs"}).json()
    # connection 2 resumes after the last id it saw; ?after= is overridden by the header
    with http.stream(
        "GET", f"{BASE}/s2/events?after=0&until=terminal", headers={"Last-Event-ID": str(part1[-1]["id"])}
    ) as response:
        part2 = committed(read_sse(response))
    assert part2[-1]["data"]["turn_id"] == first["turn_id"] and part2[-1]["event"] == "turn.completed"
    with http.stream(
        "GET", f"{BASE}/s2/events?until=terminal", headers={"Last-Event-ID": str(part2[-1]["id"])}
    ) as response:
        part3 = committed(read_sse(response))
    assert part3[-1]["data"]["turn_id"] == second["turn_id"] and part3[-1]["event"] == "turn.completed"
    seen = [(e["id"], e["event"]) for e in part1 + part2 + part3]
    assert seen == logged("s2")  # every event once, in order, across three connections
    # ?after= alone starts after that seq
    with http.stream("GET", f"{BASE}/s2/events?after={part2[0]['id']}&limit=2") as response:
        after = committed(read_sse(response))
    assert [e["id"] for e in after] == [part2[0]["id"] + 1, part2[0]["id"] + 2]


def test_a_live_stream_sees_a_new_turn_and_its_cancel(http):
    done = http.post(f"{BASE}/s3/turns", json={"text": "hello"}).json()
    assert done["status"] == "completed"
    start = logged("s3")[-1][0]
    with http.stream(
        "GET", f"{BASE}/s3/events?until=terminal&timeout=120", headers={"Last-Event-ID": str(start)}
    ) as response:
        assert response.status_code == 200
        # the stream is open (subscribed) before this turn exists
        essay = http.post(f"{BASE}/s3/turns?wait=false", json={"text": "write an essay"}).json()
        lines = response.iter_lines()

        class Lines:
            def iter_lines(self):
                return lines

        head = read_sse(Lines(), stop=lambda e: e["event"] == "message.delta")  # text is streaming
        cancel = http.post(f"{BASE}/s3/turns/{essay['turn_id']}/cancel")
        assert cancel.status_code in (200, 202), cancel.text
        rest = read_sse(Lines())
    deltas = [e for e in head + rest if e["id"] is None]
    assert deltas and all(e["data"]["turn_id"] == essay["turn_id"] for e in deltas)
    events = committed(head + rest)
    assert events[0]["id"] == start + 1 and events[0]["event"] == "turn.started"
    assert events[-1]["event"] == "turn.cancelled" and events[-1]["data"]["reason"] == "requested"
    assert [(e["id"], e["event"]) for e in events] == [row for row in logged("s3") if row[0] > start]
    assert http.get(f"{BASE}/s3/turns/{essay['turn_id']}").json()["status"] == "cancelled"
