"""Per-user rate limits and quotas (issue 37, item 2): on main any user started turns as fast as
the server took them (100 POSTs in 2.7 s, all 202) and spent any number of tokens a day.

A refused start is a JSON 429 with ``Retry-After`` (the API, the webhook), an error frame with
``retry_after`` (the websocket), a skipped run (a schedule); nothing of it is created. The count
is one statement in the database: exactly the limit of a concurrent burst passes, across
processes and a restart."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from agents_app.models import ScheduleRun, SeenWebhook
from sessions_app import dashboard, quotas
from sessions_app import models as m
from sessions_app.proactive.channels import sign
from sessions_app.proactive.schedules import fire, schedules_sync
from tests.fault.qcluster import database_url, free_port

from .test_api_sse import DEADLINE, ROOT, _stop

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/agents/ops/sessions"
SECRET = "s3cret-for-quota-tests"


@pytest.fixture(autouse=True)
def limits(settings, monkeypatch):
    """The defaults, read fresh (no cached agent total between tests)."""
    settings.JUNE_RATE_LIMITS = True
    settings.JUNE_QUOTA_CACHE_SECONDS = 0
    settings.JUNE_WEBHOOK_SECRETS = {"OPS": SECRET}
    settings.JUNE_WEBHOOK_URLS = {}
    return settings


def api_client(name: str) -> tuple[Client, object]:
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-123")
    return Client(HTTP_AUTHORIZATION=f"Bearer {m.ApiToken.issue(user)[1]}"), user


def post(client: Client, key: str, text: str = "stock tea", *, wait: bool = False):
    return client.post(
        f"{BASE}/{key}/turns" + ("" if wait else "?wait=false"),
        data=json.dumps({"text": text}),
        content_type="application/json",
    )


def assert_429(response, limit: str) -> dict:
    assert response.status_code == 429, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()["error"]
    assert body["code"] == "rate_limited" and body["limit"] == limit, body
    assert int(response["Retry-After"]) == body["retry_after"] >= 1, (response["Retry-After"], body)
    return body


def nothing_of(key: str) -> None:
    """Nothing half-created: no session, no turn, no message, no event under ``key``."""
    assert not m.Session.objects.filter(key=key).exists()
    assert not m.Turn.objects.filter(session__key=key).exists()
    assert not m.Message.objects.filter(session__key=key).exists()
    assert not m.Event.objects.filter(session__key=key).exists()


def roomy_window(seconds: int = 60, room: float = 40.0) -> None:
    """Start a window-counting test with ``room`` seconds left in the current window (a burst
    that straddled two windows would count in both): for servers of their own (their clocks are
    the machine's); a test in this process sets the clock back instead (``window_begun``)."""
    left = seconds - time.time() % seconds
    if left < room:
        time.sleep(left + 0.05)  # aligning to the clock's next window, not waiting on a condition


@pytest.fixture
def window_begun(monkeypatch):
    """The clock the quotas count by (and the dashboard reads them by) set back to the start of
    the current minute's window, running on from there: the test's starts all fall in one window
    with the whole of it left, as after ``roomy_window``'s wait, without the wait. Set back, not
    on: a day's start (the token quota's) is a window's start, so the day is the machine's."""
    offset = 0.001 - time.time() % 60
    clock = SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.time = lambda: time.time() + offset
    monkeypatch.setattr(quotas, "time", clock)
    monkeypatch.setattr(dashboard, "time", clock)


# -- the API ---------------------------------------------------------------------------------------


def test_over_the_turn_rate_the_api_answers_429_json_with_retry_after_and_creates_nothing(limits, window_begun):
    limits.JUNE_RATE_TURNS_PER_MINUTE = 2
    client, _ = api_client("rater")
    assert post(client, "r1").status_code == 202
    assert post(client, "r2").status_code == 202
    body = assert_429(post(client, "r3"), "JUNE_RATE_TURNS_PER_MINUTE")
    assert body["retry_after"] <= 60 and "2 a minute" in body["message"]
    nothing_of("r3")
    # the waiting path (and SSE) refuses the same way, before it subscribes or creates anything
    assert_429(post(client, "r4", wait=True), "JUNE_RATE_TURNS_PER_MINUTE")
    stream = client.post(
        f"{BASE}/r5/turns",
        data=json.dumps({"text": "hi"}),
        content_type="application/json",
        HTTP_ACCEPT="text/event-stream",
    )
    assert_429(stream, "JUNE_RATE_TURNS_PER_MINUTE")
    nothing_of("r4")
    nothing_of("r5")
    assert m.Turn.objects.count() == 2
    # another user has a count of their own
    other, _ = api_client("other")
    assert post(other, "o1").status_code == 202


def test_a_start_refused_for_another_reason_does_not_spend_the_rate(limits, window_begun):
    """A start counted, then refused (another user's session: 403), is given back."""
    limits.JUNE_RATE_TURNS_PER_MINUTE = 1
    alice, _ = api_client("alice")
    bob, _ = api_client("bob")
    assert post(bob, "bobs").status_code == 202
    assert post(alice, "bobs").status_code == 403
    assert post(alice, "mine").status_code == 202
    assert_429(post(alice, "again"), "JUNE_RATE_TURNS_PER_MINUTE")


def test_a_limit_of_zero_is_off(limits):
    limits.JUNE_RATE_TURNS_PER_MINUTE = 0
    client, _ = api_client("free")
    assert [post(client, f"f{n}").status_code for n in range(35)] == [202] * 35
    assert not m.RateCounter.objects.exists()


def test_a_spent_daily_token_quota_refuses_the_next_turn_until_midnight_utc(limits):
    limits.JUNE_QUOTA_TOKENS_PER_DAY = 1000
    client, user = api_client("spender")
    assert post(client, "t1").status_code == 202
    # what the turn recorded when it settled: its own calls and its subagents'
    m.Turn.objects.filter(created_by=user).update(
        usage={"input_tokens": 400, "output_tokens": 300, "children": {"input_tokens": 200, "output_tokens": 100}}
    )
    body = assert_429(post(client, "t2"), "JUNE_QUOTA_TOKENS_PER_DAY")
    now = time.time()
    assert abs(body["retry_after"] - (quotas.day_start(now) + 86_400 - now)) < 5
    assert "1,000 of 1,000" in body["message"]
    nothing_of("t2")
    # yesterday's spend does not count
    m.Turn.objects.filter(created_by=user).update(created_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    assert post(client, "t3").status_code == 202


def test_an_agents_daily_token_quota_counts_every_source(limits):
    limits.JUNE_QUOTA_AGENT_TOKENS_PER_DAY = 500
    client, _ = api_client("first")
    assert post(client, "a1").status_code == 202
    m.Turn.objects.update(usage={"input_tokens": 450, "output_tokens": 50})
    other, _ = api_client("second")
    assert_429(post(other, "a2"), "JUNE_QUOTA_AGENT_TOKENS_PER_DAY")
    nothing_of("a2")


# -- concurrency and restarts: a real server ---------------------------------------------------------


def _daphne(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            if httpx.get(url + "/api/openapi.json", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.2)  # polling for the server to listen


def test_twenty_concurrent_posts_against_a_limit_of_ten_start_exactly_ten_and_a_restart_keeps_the_count(
    tmp_path, django_user_model
):
    """20 POSTs at once from one user, 4 connections of the web process's pool (PostgreSQL) or
    SQLite's writers racing: exactly 10 × 202 and 10 × 429, 10 turns; then a new web process
    (a restart) still refuses the 11th in the same minute."""
    user = django_user_model.objects.create_user("racer", password="pw-racer-123")
    token = m.ApiToken.issue(user)[1]
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
    env.update(
        DATABASE_URL=database_url(),
        SECRET_KEY=django_settings.SECRET_KEY,
        JUNE_Q_NAME=django_settings.Q_CLUSTER["name"],
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
        JUNE_RATE_TURNS_PER_MINUTE="10",
        JUNE_RATE_LIMITS="1",
        JUNE_DB_POOL_MAX="4",
    )
    log = tmp_path / "daphne.log"
    # two web processes, both up before the window is chosen (their start is the slow part, not
    # the burst): the second stands for a restart, its count only what the database says
    proc, url = _daphne(env, log)
    later, later_url = _daphne(env, tmp_path / "daphne-2.log")
    roomy_window(room=15.0)

    async def burst(n: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
            limits=httpx.Limits(max_connections=n),
        ) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.post(f"/api/agents/ops/sessions/race-{k}/turns?wait=false", json={"text": "stock tea"})
                        for k in range(n)
                    )
                )
            )

    try:
        answers = asyncio.run(burst(20))
    except BaseException:
        _stop(later)
        raise
    finally:
        _stop(proc)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [202] * 10 + [429] * 10, (statuses, log.read_text()[-3000:])
    for a in answers:
        if a.status_code == 429:
            assert 1 <= int(a.headers["Retry-After"]) <= 60
            assert a.json()["error"]["code"] == "rate_limited"
    assert m.Turn.objects.filter(session__key__startswith="race-").count() == 10
    assert m.Session.objects.filter(key__startswith="race-").count() == 10  # the refused made none
    assert m.RateCounter.objects.get(scope="user", subject=str(user.pk)).n == 10

    try:  # another process, the first one gone: the count is the database's
        again = httpx.post(
            f"{later_url}/api/agents/ops/sessions/race-after/turns?wait=false",
            json={"text": "tea"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
    finally:
        _stop(later)
    assert again.status_code == 429 and "Retry-After" in again.headers, again.text
    assert not m.Session.objects.filter(key="race-after").exists()


# -- the websocket ----------------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_over_the_rate_a_websocket_start_gets_an_error_frame_with_retry_after(limits, window_begun):
    from .test_consumers import communicator, cookie_for, make_user, receive_until_ready

    limits.JUNE_RATE_TURNS_PER_MINUTE = 1
    alice = await make_user("wsalice")
    comm = communicator("/ws/agents/ops/sessions/ws1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await comm.send_json_to({"type": "start", "text": "stock tea", "id": 1})
    while (frame := await comm.receive_json_from(timeout=30)).get("id") != 1:
        pass
    assert frame["type"] == "ack", frame
    await comm.send_json_to({"type": "start", "text": "stock mugs", "id": 2})
    while (frame := await comm.receive_json_from(timeout=30)).get("id") != 2:
        pass
    assert frame["type"] == "error" and frame["code"] == "rate_limited" and frame["status"] == 429, frame
    assert 1 <= frame["retry_after"] <= 60
    # a chat user reads the message: no setting's name, and the wait is retry_after's (said once)
    assert frame["message"] == "too many turns: the limit is 1 a minute", frame
    turns = await sync_to_async(
        lambda: list(m.Turn.objects.filter(session__key="ws1").values_list("input__text", flat=True))
    )()
    assert turns == ["stock tea"]
    # the socket stays open and answers the next frame
    await comm.send_json_to({"type": "cancel", "turn_id": "nope", "id": 3})
    while (frame := await comm.receive_json_from(timeout=30)).get("id") != 3:
        pass
    assert frame["type"] == "error" and frame["status"] == 404
    await comm.disconnect()


# -- webhooks and schedules: limits of their own ------------------------------------------------------


def signed_post(client: Client, payload: dict):
    body = json.dumps(payload).encode()
    ts = str(int(time.time()))
    return client.post(
        "/api/agents/ops/webhook",
        data=body,
        content_type="application/json",
        HTTP_X_JUNE_TIMESTAMP=ts,
        HTTP_X_JUNE_SIGNATURE=sign(SECRET.encode(), ts, body),
    )


def test_an_agents_webhook_has_a_rate_of_its_own_and_answers_429(limits, client, window_begun):
    limits.JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE = 1
    limits.JUNE_RATE_TURNS_PER_MINUTE = 1  # a user's limit is not the webhook's
    assert signed_post(client, {"session": "hook-1", "text": "stock tea"}).status_code == 202
    refused = signed_post(client, {"session": "hook-2", "text": "stock mugs"})
    body = assert_429(refused, "JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE")
    assert body["retry_after"] <= 60
    assert m.Turn.objects.count() == 1 and not m.Session.objects.filter(key__endswith="hook-2").exists()
    assert SeenWebhook.objects.count() == 1  # the refused request was not recorded: it may be sent again
    user_client, _ = api_client("person")
    assert post(user_client, "p1").status_code == 202


def test_a_schedule_over_its_rate_skips_the_run_and_records_why(limits):
    limits.JUNE_RATE_SCHEDULE_TURNS_PER_HOUR = 1
    roomy_window(3600, room=60)
    get_user_model().objects.create_user("demo", password="pw-demo-123")
    schedules_sync()
    now = dt.datetime.now(dt.UTC)
    assert fire("ops", "daily-summary", intended=now.isoformat()) == "fired"
    later = (now + dt.timedelta(seconds=1)).isoformat()
    with pytest.MonkeyPatch.context() as mp:  # a second tick in the same hour (a "Run now")
        mp.setattr("sessions_app.proactive.schedules.tick_for", lambda cron, tz, intended, now: intended)
        assert fire("ops", "daily-summary", intended=later) == "skipped"
        assert fire("ops", "daily-summary", intended=later) == "skipped"  # a redelivered task too
    skipped = ScheduleRun.objects.get(status="skipped")
    assert "JUNE_RATE_SCHEDULE_TURNS_PER_HOUR" in skipped.error
    assert not m.Turn.objects.filter(pk=skipped.turn_id).exists()
    assert m.Turn.objects.count() == 1


# -- the dashboard ------------------------------------------------------------------------------------


def test_the_dashboard_shows_each_user_against_the_limits(limits, window_begun):
    limits.JUNE_RATE_TURNS_PER_MINUTE = 5
    limits.JUNE_QUOTA_TOKENS_PER_DAY = 10_000
    client, user = api_client("busy")
    for n in range(3):
        assert post(client, f"d{n}").status_code == 202
    m.Turn.objects.filter(created_by=user).update(usage={"input_tokens": 1000, "output_tokens": 500})
    staff = get_user_model().objects.create_user("boss", password="pw-boss-123", is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(staff)
    page = browser.get("/admin/june/dashboard/?fragment=1").content.decode()
    assert 'id="june-quotas"' in page
    table = page[page.index('id="june-quotas"') :]
    row = table[table.index("<td>busy") :][:600]
    assert "3 / 5" in row and "4,500 / 10,000" in row and "45%" in row, row
    assert "JUNE_RATE_TURNS_PER_MINUTE" in page


def test_windows_of_more_than_a_day_ago_are_deleted_when_a_new_window_opens(limits, monkeypatch):
    monkeypatch.setitem(quotas._pruned, "at", 0.0)
    now = time.time()
    old = m.RateCounter.objects.create(scope="user", subject="1", window_start=int(now) - 3 * 86_400, n=5)
    recent = m.RateCounter.objects.create(
        scope="user", subject="1", window_start=quotas.window_of(quotas.USER, now) - 60, n=5
    )
    quotas.admit(quotas.USER, "2", now=now)
    assert not m.RateCounter.objects.filter(pk=old.pk).exists()
    assert m.RateCounter.objects.filter(pk=recent.pk).exists()  # today's stay: the dashboard's busiest minute


# -- a user's or a group's own limits (the admin) -------------------------------------------------------

L = quotas.Limits


@pytest.mark.parametrize(
    ("own", "groups", "expected"),
    [
        (None, [], L(None, None)),  # the settings
        (L(5, None), [L(50, 7)], L(5, 7)),  # their own row first, per limit
        (None, [L(10, None), L(40, 100)], L(40, 100)),  # the most generous group
        (None, [L(10, 5), L(0, None)], L(0, 5)),  # 0 (no limit) is the most generous
        (L(None, 0), [L(3, 3)], L(3, 0)),  # their own 0 lifts the quota
    ],
)
def test_a_users_limits_resolve_from_their_own_row_then_their_groups(own, groups, expected):
    assert quotas.resolve(own, groups) == expected


def test_the_admins_overrides_raise_and_lower_a_users_limits(limits, window_begun):
    from django.contrib.auth.models import Group

    limits.JUNE_RATE_TURNS_PER_MINUTE = 1
    power, power_user = api_client("power")
    slow, slow_user = api_client("slow")
    team = Group.objects.create(name="power-users")
    power_user.groups.add(team)
    m.QuotaOverride.objects.create(group=team, turns_per_minute=3)
    m.QuotaOverride.objects.create(user=slow_user, tokens_per_day=10)
    assert [post(power, f"pw{n}").status_code for n in range(4)] == [202, 202, 202, 429]
    assert "3 a minute" in post(power, "pw9").json()["error"]["message"]
    assert post(slow, "sl0").status_code == 202
    m.Turn.objects.filter(created_by=slow_user).update(usage={"input_tokens": 10})
    assert_429(post(slow, "sl1"), "JUNE_QUOTA_TOKENS_PER_DAY")
    staff = get_user_model().objects.create_user("chief", password="pw-chief-123", is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(staff)
    page = browser.get("/admin/june/dashboard/?fragment=1").content.decode()
    table = page[page.index('id="june-quotas"') :]
    row = table[table.index("<td>power") :][:600]
    assert "(own limits)" in row and "3 / 3" in row, row
    # the admin's form refuses a row for nobody (or for both)
    form = browser.post("/admin/sessions_app/quotaoverride/add/", {"turns_per_minute": "5", "note": ""})
    assert form.status_code == 200 and "Choose a user or a group" in form.content.decode()
