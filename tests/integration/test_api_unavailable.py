"""The API while the database is out of reach: a JSON 503 ``unavailable``, never HTML, never a
hang (the real outage, PostgreSQL restarted under load: tests/fault/test_chaos.py)."""

from __future__ import annotations

import contextlib

import pytest
from django.db import connections

from .test_api import BASE, Api, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def database_down():
    conn = connections["default"]
    saved = dict(conn.settings_dict)
    conn.close()
    if conn.vendor == "postgresql":
        conn.settings_dict["PORT"] = "1"  # nothing listens there: connection refused
    else:
        conn.settings_dict["NAME"] = "/nonexistent/june/db.sqlite3"
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(saved)


def test_requests_while_the_database_is_down_get_a_json_503():
    """Pins the contract of issue 13 (chaos test): a request refused because the database is
    down answered a bare 500 "internal_error"; it is a 503 ``unavailable`` with Retry-After."""
    api = Api(token_for(make_user("alice")))
    with database_down():
        for method, path, body in (
            ("post", f"{BASE}/down/turns?wait=false", {"text": "hi"}),
            ("post", f"{BASE}/down/turns", {"text": "hi"}),
            ("get", f"{BASE}/down/pending", None),
        ):
            status, answer, response = api.call(method, path, body)
            assert status == 503, (method, path, answer)
            assert answer["error"]["code"] == "unavailable" and response["Retry-After"] == "2"
