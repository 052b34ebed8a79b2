"""What the hostile tests share: clients, the checks every answer must pass, the database's
consistency afterwards, and a log watcher (no traceback may reach the server's log)."""

from __future__ import annotations

import collections
import json
import logging
import os
from typing import Any
from urllib.parse import quote

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Count, Max
from django.test import AsyncClient
from hypothesis import HealthCheck, Phase, settings

from sessions_app import models as m
from tests.settle import settle_tasks

BASE = "/api/agents/ops/sessions"

_COMMON = dict(
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
)
settings.register_profile("hostile", max_examples=60, **_COMMON)
settings.register_profile("hostile-long", max_examples=600, **_COMMON)
#: the settings of every property here (a decorator): ``JUNE_HOSTILE_PROFILE`` picks the profile
HOSTILE = settings(settings.get_profile(os.environ.get("JUNE_HOSTILE_PROFILE", "hostile")))


def hostile(max_examples: int) -> settings:
    """The profile, with this property's own example count (scaled by the long profile).
    ``JUNE_HOSTILE_NO_SHRINK=1``: report the first failure as found (fast, against a broken tree)."""
    scale = 10 if os.environ.get("JUNE_HOSTILE_PROFILE") == "hostile-long" else 1
    extra = (
        {"phases": [Phase.explicit, Phase.reuse, Phase.generate]} if os.environ.get("JUNE_HOSTILE_NO_SHRINK") else {}
    )
    return settings(HOSTILE, max_examples=max_examples * scale, **extra)


#: hostile cases generated, per endpoint (printed at the end of the run: tests/hostile/conftest.py)
CASES: collections.Counter[str] = collections.Counter()
#: answers with a 5xx status seen, per endpoint (must stay 0)
SERVER_ERRORS: collections.Counter[str] = collections.Counter()
#: accepted (2xx) answers per endpoint: the hostile traffic also reaches the success paths
ACCEPTED: collections.Counter[str] = collections.Counter()
#: (endpoint, status) of every answer
STATUSES: collections.Counter[tuple[str, int]] = collections.Counter()


def make_user(name: str, *, operator: bool = False) -> Any:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-123")
    if operator:  # an operator: an active staff member of the operators group (authorize_answer)
        user.is_staff = True
        user.save(update_fields=["is_staff"])
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
    return user


def token_for(user: Any) -> str:
    return m.ApiToken.issue(user, name="hostile")[1]


def path_segment(value: str) -> str:
    """A path segment as a client would send it (anything percent-encoded, lone surrogates too)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


class Api:
    """Bearer-token client; ``send`` returns (status, parsed JSON body or the stream's bytes,
    response) and asserts the answer is JSON unless it is a stream. Through Django's AsyncClient,
    so a stream is read on the event loop that made it."""

    def __init__(self, token: str | None) -> None:
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def send(self, method: str, path: str, body: bytes | None = None, **extra: Any):
        return async_to_sync(self._send)(method, path, body, extra)

    async def _send(self, method: str, path: str, body: bytes | None, extra: dict[str, Any]):
        headers = dict(self.headers)
        for name, value in extra.items():  # META-style names, as Client takes them
            assert name.startswith("HTTP_"), name
            # as a server decodes what a client sent as UTF-8: latin-1, byte by byte
            headers[name[5:].replace("_", "-").title()] = value.encode("utf-8", "surrogatepass").decode("latin-1")
        client = AsyncClient(raise_request_exception=False)
        if body is not None:
            response = await getattr(client, method)(path, data=body, content_type="application/json", headers=headers)
        else:
            response = await getattr(client, method)(path, headers=headers)
        if response.streaming:
            streamed = b"".join([chunk async for chunk in response.streaming_content])
            await settle_tasks()
            return response.status_code, streamed, response
        assert response["Content-Type"].startswith("application/json"), (
            path,
            response.status_code,
            response.content[:300],
        )
        return response.status_code, json.loads(response.content), response


def check_answer(endpoint: str, status: int, body: Any, response: Any, *, ok: tuple[int, ...]) -> None:
    """The only acceptable answers: the documented success, or a 4xx JSON error."""
    CASES[endpoint] += 1
    STATUSES[endpoint, status] += 1
    if 200 <= status < 300:
        ACCEPTED[endpoint] += 1
    if status >= 500:
        SERVER_ERRORS[endpoint] += 1
    assert status < 500, (endpoint, status, body)
    if status in ok:
        return
    assert 400 <= status < 500, (endpoint, status, body)
    assert isinstance(body, dict) and set(body) == {"error"}, (endpoint, body)
    error = body["error"]
    assert isinstance(error.get("code"), str) and isinstance(error.get("message"), str), body
    assert "Traceback" not in error["message"] and "invalid literal" not in error["message"], body


class LogWatch(logging.Handler):
    """Collects every record at ERROR or above, and every record carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def problems(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records]


def assert_consistent() -> None:
    """No duplicate positions (turn order, event seq, message index), counters that match what
    was handed out, no turn left running (no worker ran), no parked turn without its request."""
    dup_turns = m.Turn.objects.values("session_id", "order").annotate(n=Count("id")).filter(n__gt=1)
    assert not dup_turns.exists(), list(dup_turns)
    # a seq is handed out once: rows that share one are an event and its copies in the branches
    # forked after it (same type, turn and payload, another generation)
    dup_events = m.Event.objects.values("session_id", "seq").annotate(n=Count("*")).filter(n__gt=1)
    for dup in dup_events:
        rows = list(
            m.Event.objects.filter(session_id=dup["session_id"], seq=dup["seq"]).values_list(
                "generation", "type", "turn_id", "data"
            )
        )
        assert len({g for g, *_ in rows}) == len(rows) and len({tuple(map(str, r[1:])) for r in rows}) == 1, rows
        assert (
            m.Branch.objects.filter(
                session_id=dup["session_id"], generation__in=[r[0] for r in rows], parent_generation__isnull=False
            ).count()
            >= len(rows) - 1
        ), rows
    dup_messages = m.Message.objects.values("session_id", "generation", "index").annotate(n=Count("*")).filter(n__gt=1)
    assert not dup_messages.exists(), list(dup_messages)
    for s in m.Session.objects.annotate(last_event=Max("events__seq"), last_order=Max("turns__order")):
        assert s.event_seq == (s.last_event or 0), (s.key, s.event_seq, s.last_event)
        assert s.turn_seq == (s.last_order or 0), (s.key, s.turn_seq, s.last_order)
    assert not m.Turn.objects.filter(status="running").exists()
    for turn in m.Turn.objects.filter(status="suspended"):
        assert (turn.pending or {}).get("request", {}).get("id"), turn.pk
