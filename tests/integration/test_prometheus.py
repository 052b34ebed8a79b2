"""``GET /api/metrics``: the site's state in Prometheus' text format, for staff only (issue 39
item 2: "optionally a Prometheus scrape endpoint for staff"). Read from the database, so the
figures are the site's whichever process answers."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client, override_settings

from sessions_app import models as m

from .test_api import make_user, token_for
from .test_tool_approval import parked

pytestmark = pytest.mark.django_db(transaction=True)


def _scrape(user=None, *, token: str | None = None):
    client = Client()
    headers = {}
    if token:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    elif user is not None:
        client.force_login(user)
    return client.get("/api/metrics", **headers)


def _samples(text: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def test_anonymous_and_non_staff_are_refused_in_json():
    alice = make_user("alice")
    anon = _scrape()
    assert anon.status_code == 401 and anon["Content-Type"].startswith("application/json")
    refused = _scrape(token=token_for(alice))
    assert refused.status_code == 403 and json.loads(refused.content)["error"]["code"] == "forbidden"
    assert b"june_turns" not in refused.content


@override_settings(JUNE_MODEL_PRICES={"demo": {"input": 1_000_000.0, "output": 0.0}})  # $1 per token
def test_staff_scrape_parked_turns_tokens_and_cost(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    parked(alice, "m1")
    parked(alice, "m2")
    staff = make_user("ops-staff")
    staff.is_staff = True
    staff.save()
    from agents_app.runtime.seams import SessionRef, TurnInput
    from sessions_app import wiring

    for n in range(2):  # two turns waiting for a worker
        wiring.store().create_turn_sync(SessionRef("ops", f"waiting-{n}"), TurnInput(text="hi"), turn_id=f"waiting{n}")
    response = _scrape(token=token_for(staff))
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.content.decode()
    assert "# TYPE june_turns_parked gauge" in text
    got = _samples(text)
    assert got['june_turns{agent="ops",status="suspended"}'] == 2
    assert got['june_turns_parked{agent="ops"}'] == 2
    assert got["june_workers_alive"] >= 0 and got["june_turns_failed_last_hour"] == 0
    assert got["june_queue_depth"] == m.Turn.objects.filter(status="queued").count() == 2
    spent = sum(m.Turn.objects.exclude(status="queued").values_list("usage__input_tokens", flat=True))
    assert spent > 0 and got['june_tokens_today{agent="ops",type="input"}'] == spent
    assert got['june_cost_usd_today{agent="ops"}'] == pytest.approx(spent)
    # a staff session works as well as a token; every line is a comment or name{labels} value
    again = _scrape(staff)
    assert again.status_code == 200
    assert all(
        re.fullmatch(r"(#.*|[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+)", line) for line in again.content.decode().splitlines()
    )
