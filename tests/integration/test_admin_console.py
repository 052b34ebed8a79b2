"""The operator console (issue 17, items 8-11): the dashboard, the turn timeline, tokens and
cost per turn / session / agent / day, and the inbox's "requested by", links and waiting count.

Pins: the turn page was a wall of JSON with minute-precision times; nothing summed tokens or
cost; the inbox did not say who asked nor link the session and turn; the admin index did not
say how many requests wait."""

from __future__ import annotations

import re
import time

import pytest
from django.test import Client

from sessions_app import models as m
from sessions_app import services
from sessions_app.admin import console, timeline

from .test_api import BASE, Api, inline_worker, make_user, token_for  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def staff_client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_prices_match_by_prefix_and_count_cache_tokens(settings):
    assert console.price_for("claude-sonnet-4-6-20260101") == {"input": 3.0, "output": 15.0}
    assert console.price_for("claude-opus-4-1-x")["output"] == 75.0  # the longer prefix wins over claude-opus-4
    assert console.price_for("gpt-5") is None
    assert console.cost_of({"input_tokens": 1_000_000, "output_tokens": 1_000_000}, "demo") == 0.0
    cost = console.cost_of(
        {
            "input_tokens": 1_000_000,
            "output_tokens": 2_000_000,
            "cache_read_input_tokens": 1_000_000,
            "cache_creation_input_tokens": 1_000_000,
        },
        "claude-sonnet-4-6",
    )
    assert cost == pytest.approx(3 + 30 + 0.3 + 3.75)
    settings.JUNE_MODEL_PRICES = {"demo": {"input": 1.0, "output": 2.0}}
    assert console.cost_of({"input_tokens": 500_000, "output_tokens": 500_000}, "demo") == pytest.approx(1.5)
    assert console.cost_of({}, "unknown-model") is None


def test_cache_writes_are_priced_by_their_ttl():
    """Issue 37: a 1-hour cache write costs 2x the input price, not the 5-minute 1.25x; the
    provider's usage keeps the 1-hour part of the writes apart."""
    usage = {
        "cache_creation_input_tokens": 1_000_000,
        "cache_creation_1h_input_tokens": 400_000,
        "cache_read_input_tokens": 2_000_000,
    }
    assert console.cost_of(usage, "claude-sonnet-4-6") == pytest.approx(0.6 * 3.75 + 0.4 * 6.0 + 2 * 0.3)
    assert console.cost_of({"cache_creation_input_tokens": 1_000_000}, "claude-opus-4-6") == pytest.approx(6.25)


def test_the_timeline_shows_a_model_step_s_cache_reads_and_writes():
    from django.template.loader import render_to_string

    tokens = {
        "input_tokens": 12,
        "output_tokens": 30,
        "cache_read_input_tokens": 9000,
        "cache_creation_input_tokens": 1300,
    }
    html = render_to_string(
        "admin/june/_timeline.html",
        {
            "steps": [
                {"kind": "model", "name": "model step", "tokens": tokens, "cost": 0.01},
                {
                    "kind": "model",
                    "name": "model step",
                    "tokens": {"input_tokens": 5, "output_tokens": 1},
                    "cost": None,
                },
            ]
        },
    )
    assert '12 in / 30 out · <span class="june-cache">cache 9000 read / 1300 written</span>' in html
    assert html.count("june-cache") == 1  # a step without cache traffic says nothing of it


def test_the_turn_page_reads_as_a_timeline_with_tokens_and_cost(inline_worker, settings):
    settings.JUNE_MODEL_PRICES = {"demo": {"input": 1.0, "output": 1.0}}
    alice = make_user("alice")
    api = Api(token_for(alice))
    status, body, _ = api.post(f"{BASE}/t1/turns", {"text": "order blue mugs"})
    assert status == 200 and body["status"] == "completed"
    turn = m.Turn.objects.get(pk=body["turn_id"])
    steps = timeline.timeline(turn)
    kinds = [s["kind"] for s in steps]
    assert kinds[0] == "start" and kinds[-1] == "end" and "model" in kinds
    tool = next(s for s in steps if s["kind"] == "tool")
    assert tool["name"] == "create_order" and tool["state"] == "completed" and tool["duration"]
    assert '"mugs"' in tool["input"] or "mugs" in tool["input"]
    model = next(s for s in steps if s["kind"] == "model")
    assert model["tokens"]["output_tokens"] > 0 and model["cost"] > 0

    admin = make_user("root")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    page = staff_client(admin).get(f"/admin/sessions_app/turn/{turn.pk}/change/").content.decode()
    assert 'id="june-timeline"' in page and "create_order" in page
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC</time>", page), (
        "times to the millisecond, with the zone"
    )
    assert "its last step is committed" in page  # the journal phase in words
    assert "released (last held by" in page  # the lease in words
    assert "demo: $" in page  # tokens and cost of the turn
    session_page = staff_client(admin).get(f"/admin/sessions_app/session/{turn.session_id}/change/").content.decode()
    assert 'id="june-session-usage"' in session_page and "Model <code>demo</code>" in session_page
    assert "Live generation: 1 turn," in session_page  # not "1 turns"


def test_the_dashboard_shows_running_expired_queued_parked_failed_and_cost(inline_worker):
    alice = make_user("alice")
    api = Api(token_for(alice))
    status, parked, _ = api.post(f"{BASE}/p1/turns", {"text": "refund order 42 10"})
    assert parked["status"] == "suspended"
    status, done, _ = api.post(f"{BASE}/c1/turns", {"text": "stock tea"})
    assert done["status"] == "completed"
    # a turn a dead worker held (its lease ran out) and one waiting for a worker
    session = m.Session.objects.create(agent="ops", key="x1", owner=alice)
    m.Turn.objects.create(
        id="e" * 32,
        session=session,
        order=1,
        status="running",
        input={"text": "stuck"},
        lease_owner="host:1",
        lease_expires_at=time.time() - 30,
        attempts=1,
    )
    m.Turn.objects.create(id="d" * 32, session=session, order=2, status="queued", input={"text": "waiting"})
    m.Turn.objects.create(id="a" * 32, session=session, order=0, status="failed", input={"text": "boom"}, attempts=2)
    m.Event.objects.create(session=session, seq=1, turn_id="a" * 32, type="turn.failed", data={"error": "boom"})

    data = console.dashboard_data()
    assert data["counts"]["expired"] == 1 and data["counts"]["queued"] == 1 and data["counts"]["parked"] == 1
    assert data["counts"]["failed_hour"] == 1 and data["counts"]["retried_hour"] == 1
    assert [r["id"] for r in data["expired"]] == ["e" * 32] and "expired" in data["expired"][0]["lease"]
    assert data["parked"][0]["by"] == "alice" and "refund" in data["parked"][0]["prompt"].lower()
    assert data["usage_today"].turns >= 2 and "ops" in data["usage_per_agent"]
    assert any(s["func"].endswith("sweep_expired_leases") for s in data["schedules"])

    operator = make_user("olga", operator=True)
    operator.is_staff = True
    operator.save()
    c = staff_client(operator)
    page = c.get("/admin/june/dashboard/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="june-dashboard"' in html and "june/dashboard.js" in html and "stuck" in html
    fragment = c.get("/admin/june/dashboard/?fragment=1").content.decode()
    assert "<html" not in fragment and 'id="june-count-expired"' in fragment
    # not staff: the admin's login
    assert staff_client(alice).get("/admin/june/dashboard/").status_code == 302
    # the admin index and the inbox say how many wait, who asked, and link session and turn
    index = c.get("/admin/").content.decode()
    assert 'id="june-waiting-count">1<' in index and "/admin/june/dashboard/" in index
    inbox = c.get("/admin/sessions_app/approvalrequest/").content.decode()
    assert "Approval inbox (1 waiting)" in inbox
    assert "requested by" in inbox.lower() and ">alice<" in inbox
    assert f"/admin/sessions_app/turn/{parked['turn_id']}/change/" in inbox
    assert "/generation/0/" in inbox
    answer_page = c.get(f"/admin/sessions_app/approvalrequest/{parked['turn_id']}/change/").content.decode()
    assert f"/admin/sessions_app/turn/{parked['turn_id']}/change/" in answer_page


def test_the_demo_operator_sees_schedules_runs_and_deliveries_and_runs_a_schedule_now(settings):
    """Issue 17 item 12: docs/proactive.md followed from the embedded default — the demo's
    operator (not a superuser) could not see schedules, runs or webhook deliveries."""
    import io

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from agents_app.models import AgentSchedule

    settings.JUNE_EMBEDDED = True
    out = io.StringIO()
    call_command("june_demo", stdout=out)
    call_command("june_sync_schedules", stdout=io.StringIO())
    assert "/admin/june/dashboard/" in out.getvalue()
    operator = get_user_model().objects.get(username="operator")
    assert not operator.is_superuser
    c = staff_client(operator)
    for url in (
        "/admin/agents_app/agentschedule/",
        "/admin/agents_app/schedulerun/",
        "/admin/agents_app/webhookdelivery/",
        "/admin/june/dashboard/",
    ):
        assert c.get(url).status_code == 200, url
    schedule = AgentSchedule.objects.filter(func="sessions_app.proactive.schedules.fire").exclude(repeats=0).first()
    assert schedule is not None, "the demo agent declares a schedule"
    later = timezone.now() + timezone.timedelta(days=1)
    AgentSchedule.objects.filter(pk=schedule.pk).update(next_run=later)
    response = c.post("/admin/agents_app/agentschedule/", {"action": "run_now", "_selected_action": [schedule.pk]})
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.next_run <= timezone.now(), "run now made it due"


def test_a_turn_ended_at_its_limit_says_so_in_the_api_the_timeline_and_the_turn_page(
    inline_worker, monkeypatch, settings
):
    """Issue 37: a runaway model (the demo's ``loop forever``) ends at the default limit of 50
    model calls with an answer; the API's turn JSON carries the usage and the mark, the timeline's
    end row and the turn page say which limit it was."""
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    api = Api(token_for(alice))
    status, body, _ = api.post(f"{BASE}/loop1/turns", {"text": "loop forever"})
    assert status == 200 and body["status"] == "completed", body
    assert "stopped at this turn's limit" in body["text"]
    status, turn_json, _ = api.get(f"{BASE}/loop1/turns/{body['turn_id']}")
    assert turn_json["usage"]["limited"] == "model_calls" and turn_json["usage"]["model_calls"] == 50
    turn = m.Turn.objects.get(pk=body["turn_id"])
    end = timeline.timeline(turn)[-1]
    assert end["kind"] == "end" and "at its limit of model calls" in end["result"]
    admin = make_user("root")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    page = staff_client(admin).get(f"/admin/sessions_app/turn/{turn.pk}/change/").content.decode()
    assert "reached its limit of model calls" in page and "model calls 50" in page


def test_cost_per_user_counts_each_call_once_at_the_cache_prices(settings):
    """Issue 37: cost per user and day; a parent's usage keeps its children's apart
    (``usage["children"]``), so a tree's calls are counted once, each at its own agent's price."""
    settings.JUNE_MODEL_PRICES = {"demo": {"input": 1.0, "output": 2.0}}
    alice, bob = make_user("alice"), make_user("bob")
    mine = m.Session.objects.create(agent="ops", key="u1", owner=alice)
    child = m.Session.objects.create(agent="ops", key="sub:x:c0:0", owner=alice)
    theirs = m.Session.objects.create(agent="ops", key="u2", owner=bob)
    m.Turn.objects.create(
        id="p" * 32,
        session=mine,
        order=0,
        status="completed",
        input={"text": "a"},
        usage={
            "input_tokens": 1_000_000,
            "cache_read_input_tokens": 1_000_000,
            "model_calls": 2,
            "children": {"input_tokens": 500_000, "model_calls": 1},
        },
    )
    m.Turn.objects.create(
        id="c" * 32,
        session=child,
        order=0,
        status="completed",
        input={"text": "b"},
        depth=1,
        usage={"input_tokens": 500_000, "model_calls": 1, "limited": "model_calls"},
    )
    m.Turn.objects.create(
        id="b" * 32,
        session=theirs,
        order=0,
        status="completed",
        input={"text": "c"},
        usage={"output_tokens": 1_000_000},
    )
    per_user = console.usage_per_user(m.Turn.objects.all())
    assert per_user["alice"].cost == pytest.approx(1.0 + 0.1 + 0.5)  # not 2.1: the children once
    assert per_user["alice"].tokens["input_tokens"] == 1_500_000 and per_user["alice"].turns == 2
    assert per_user["bob"].cost == pytest.approx(2.0)
    assert list(per_user) == ["bob", "alice"]  # the biggest spender first
    from django.template.loader import render_to_string

    html = render_to_string("admin/june/_dashboard_body.html", console.dashboard_data())
    assert 'id="june-usage-users"' in html and "<td>alice</td>" in html and "<td>bob</td>" in html


def test_the_inbox_says_what_started_a_turn_nobody_owns(inline_worker):
    """A parked turn no person started (here the command line's) was "requested by: inbound" in
    the inbox and on the dashboard: an internal word. It says what started it now."""
    services.turn_start(agent="ops", key="cli-1", text="refund order 42 10", user=None, source="cli")
    turn = m.Turn.objects.get(session__key="cli-1")
    assert turn.status == "suspended", turn.status
    operator = make_user("olga", operator=True)
    operator.is_staff = True
    operator.save()
    inbox = staff_client(operator).get("/admin/sessions_app/approvalrequest/").content.decode()
    assert "the command line (manage.py june)" in inbox and ">inbound<" not in inbox
    assert console.dashboard_data()["parked"][0]["by"] == "the command line (manage.py june)"
