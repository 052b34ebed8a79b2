"""Who may start a turn over the API, now that a start reads less before it writes: a bearer
token is read once per ``JUNE_TOKEN_CACHE_SECONDS`` per process (``web.auth``), and a user's
session is checked by the creation itself (``access.start_checked_by_store``: the store creates a
user's turn only in a session that user owns or creates). Each refusal keeps its status and
body, and leaves nothing behind."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from sessions_app import models as m
from sessions_app.web import auth
from tests.integration.test_api import BASE, Api, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def later(monkeypatch):
    """Move the token cache's clock on by ``seconds``: ``later(6)``."""
    now = [auth.clock()]
    monkeypatch.setattr(auth, "clock", lambda: now[0])

    def move(seconds: float) -> None:
        now[0] += seconds

    return move


def _start(api: Api, key: str = "s1"):
    return api.post(f"{BASE}/{key}/turns?wait=false", {"text": "hello"})


def _elsewhere(sql: str, params: list) -> None:
    """A change another process makes: plain SQL, no signal reaches this process."""
    with connection.cursor() as cur:
        cur.execute(sql, params)


def test_a_token_is_read_once_per_cache_window_and_its_use_still_recorded(later, settings):
    settings.JUNE_TOKEN_CACHE_SECONDS = 5
    alice = make_user("alice")
    api = Api(token_for(alice))
    with _counting() as statements:
        assert _start(api)[0] == 202
        assert _start(api, "s2")[0] == 202
    assert sum("sessions_app_apitoken" in sql and sql.startswith("SELECT") for sql in statements) == 1
    assert m.ApiToken.objects.get().last_used_at is not None


def test_a_bursts_requests_that_find_their_token_unread_make_one_read_between_them(settings, monkeypatch):
    """Requests of one token that find it missing (or past its window) at once take the first's
    read and its record of use, not one each: a burst's first requests, and its first after
    each window."""
    import threading

    from django.db import connections

    settings.JUNE_TOKEN_CACHE_SECONDS = 5
    alice = make_user("alice")
    raw = token_for(alice)
    reads, read = [], auth._read

    def slow_read(key_hash):
        reads.append(key_hash)
        time.sleep(0.2)  # the others arrive while it reads
        return read(key_hash)

    monkeypatch.setattr(auth, "_read", slow_read)
    auth._known.clear()
    go, users = threading.Barrier(5), []

    def request() -> None:
        try:
            go.wait()
            users.append(auth.user_for_token(raw))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [u.pk for u in users] == [alice.pk] * 5 and len({id(u) for u in users}) == 5
    assert len(reads) == 1


def test_a_token_deleted_in_another_process_is_refused_within_the_cache_window(later, settings):
    settings.JUNE_TOKEN_CACHE_SECONDS = 5
    alice = make_user("alice")
    api = Api(token_for(alice))
    assert _start(api)[0] == 202
    _elsewhere("DELETE FROM sessions_app_apitoken", [])
    assert _start(api, "s2")[0] == 202  # within the window: as it was read
    later(5)
    status, body, response = _start(api, "s3")
    assert (status, body["error"]["code"], body["error"]["message"]) == (401, "unauthenticated", "invalid API token")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not m.Session.objects.filter(key="s3").exists()


def test_a_token_deleted_in_this_process_is_refused_at_once(later, settings):
    settings.JUNE_TOKEN_CACHE_SECONDS = 5
    alice = make_user("alice")
    api = Api(token_for(alice))
    assert _start(api)[0] == 202
    m.ApiToken.objects.all().delete()  # the admin's delete, the erasure's
    assert _start(api, "s2")[0] == 401
    assert not m.Session.objects.filter(key="s2").exists()


def test_a_user_deactivated_elsewhere_is_refused_within_the_window_here_at_once(later, settings):
    settings.JUNE_TOKEN_CACHE_SECONDS = 5
    alice = make_user("alice")
    api = Api(token_for(alice))
    assert _start(api)[0] == 202
    _elsewhere(f"UPDATE {get_user_model()._meta.db_table} SET is_active = %s", [False])
    later(5)
    assert _start(api, "s2")[0] == 401
    # and saved here (the admin's checkbox): at once, with no wait for the window
    bob = make_user("bob")
    bob_api = Api(token_for(bob))
    assert _start(bob_api, "b1")[0] == 202
    bob.is_active = False
    bob.save()
    assert _start(bob_api, "b2")[0] == 401
    assert not m.Session.objects.filter(key__in=["s2", "b2"]).exists()


def test_a_deleted_user_is_refused(later, settings):
    settings.JUNE_TOKEN_CACHE_SECONDS = 5
    alice = make_user("alice")
    api = Api(token_for(alice))
    assert _start(api)[0] == 202
    m.Turn.objects.all().delete()
    m.Session.objects.all().delete()
    alice.delete()
    assert _start(api, "s2")[0] == 401
    assert not m.Session.objects.exists()


def test_with_the_cache_off_every_request_reads_its_token(later, settings):
    settings.JUNE_TOKEN_CACHE_SECONDS = 0
    alice = make_user("alice")
    api = Api(token_for(alice))
    assert _start(api)[0] == 202
    _elsewhere("DELETE FROM sessions_app_apitoken", [])
    assert _start(api, "s2")[0] == 401


# -- a user's own session, checked by the creation ---------------------------------------------------


def test_another_users_session_is_refused_and_nothing_is_created():
    alice, bob = make_user("alice"), make_user("bob")
    assert _start(Api(token_for(alice)))[0] == 202
    status, body, _ = _start(Api(token_for(bob)))
    assert (status, body["error"]["code"]) == (403, "forbidden")
    assert body["error"]["message"] == "this session belongs to another user"
    session = m.Session.objects.get(key="s1")
    assert session.owner == alice and session.turn_seq == 1 and session.turns.count() == 1


def test_another_users_parked_session_is_a_403_not_a_409():
    """The creation's ownership comes before the start rules' facts: the status says nothing of
    another user's session."""
    alice, bob = make_user("alice"), make_user("bob")
    assert _start(Api(token_for(alice)))[0] == 202
    m.Turn.objects.filter(session__key="s1").update(status="suspended")
    assert _start(Api(token_for(alice)))[0] == 409  # its owner: parked
    status, body, _ = _start(Api(token_for(bob)))
    assert (status, body["error"]["message"]) == (403, "this session belongs to another user")
    assert m.Turn.objects.count() == 1


def test_a_session_with_no_owner_is_refused():
    alice = make_user("alice")
    m.Session.objects.create(agent="ops", key="nobodys")
    status, body, _ = _start(Api(token_for(alice)), "nobodys")
    assert (status, body["error"]["message"]) == (403, "this session has no owner: it is reachable in the admin only")
    assert not m.Turn.objects.exists()


def test_a_channels_key_is_still_refused_before_the_start():
    alice = make_user("alice")
    status, body, _ = _start(Api(token_for(alice)), "webhook:x")
    assert (status, body["error"]["code"]) == (403, "forbidden")
    assert "webhook channel" in body["error"]["message"]
    assert not m.Session.objects.exists()


def test_a_new_session_is_the_starters_and_a_bad_key_or_agent_is_refused_first():
    alice = make_user("alice")
    api = Api(token_for(alice))
    assert _start(api, "fresh")[0] == 202
    assert m.Session.objects.get(key="fresh").owner == alice
    assert _start(api, "bad key")[0] == 400
    status, body, _ = api.post("/api/agents/nope/sessions/s1/turns?wait=false", {"text": "hi"})
    assert (status, body["error"]["code"]) == (404, "not_found")
    assert m.Session.objects.count() == 1


class _counting:
    """The SQL this process sent meanwhile (Django's cursor; the creation's own round trip on
    PostgreSQL is not among them)."""

    def __enter__(self) -> list[str]:
        from django.test.utils import CaptureQueriesContext

        self._ctx = CaptureQueriesContext(connection)
        self._ctx.__enter__()
        self.sql: list[str] = []
        return self.sql

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)
        self.sql.extend(q["sql"] for q in self._ctx.captured_queries)
