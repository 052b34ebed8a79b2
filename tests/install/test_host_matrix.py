"""The matrix of host projects, each a startproject variant of docs/install.md built as the page
says (tests/install/variants.py), on the suite's backend: a custom user with a UUID key and the
email as USERNAME_FIELD with its static files served its own way (no WhiteNoise, another
origin), and a host with its own auth URLs and LOGIN_URL that mounts June at "". The page's own
build (test_install_docs.py) is the third: June under "assistant/", startproject's SQLite
settings under a burst, PostgreSQL + Redis on that backend. Chromium only for what differs:
logging in, the static files, the websocket, the admin."""

from __future__ import annotations

import pytest

from tests.install import person, variants
from tests.install.conftest import on_postgres

# a whole project built and driven: minutes on a loaded machine, not the suite's 300 s default
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(900)]


def _tags() -> set[str]:
    return {"postgres"} if on_postgres() else set()


def test_a_uuid_email_user_and_static_files_served_elsewhere(host_database, new_context):
    host, extra = variants.uuid_email_user_own_static(host_database, _tags())
    try:
        host.build()
        variants.serve_static(host, extra["static_port"])
        host.start()
        user = {**person.USER}
        person.make_user(host, user)

        page = new_context(host.base).new_page()
        static = person.watch_static(page, where=f"127.0.0.1:{extra['static_port']}/")
        person.log_in(page, "/assistant/", "/assistant/login/", extra["login"], user["password"])
        reply, _ = person.chat(page, "/assistant/", "clerk", "order 2 mugs")
        assert "create_order" in reply, reply
        person.swagger(page, "/assistant/")
        names = {url.rsplit("/", 1)[-1] for url, _ in static}
        assert {"june.css", "main.js", "markdown-it.js", "swagger-ui-bundle.js"} <= names, static
        assert all(status in (200, 304) for _, status in static), static

        client = person.api(host, "/assistant/", host.manage("june", "token", extra["login"]).strip())
        person.features(client)
        parked = client.post("api/agents/clerk/sessions/s2/turns", json={"text": "refund order 1 5"}).json()
        assert parked["status"] == "suspended", parked
        operator = new_context(host.base).new_page()
        person.approve_in_admin(operator, "/admin/", parked["turn_id"], login=extra["operator"])
        done = person.wait_status(client, f"api/agents/clerk/sessions/s2/turns/{parked['turn_id']}", "completed")
        assert done == "completed"
    except BaseException:
        print(host.logs())
        raise
    finally:
        host.stop()


def test_own_auth_urls_and_login_url_with_june_at_the_root(host_database, new_context):
    host, _ = variants.own_auth_at_root(host_database, _tags())
    try:
        host.build()
        host.start(ready_path="/accounts/login/")
        person.make_user(host)

        page = new_context(host.base).new_page()
        person.log_in(page, "/", "/accounts/login/", "alice", person.USER["password"])
        reply, _ = person.chat(page, "/", "clerk", "order 2 mugs")
        assert "create_order" in reply, reply
        assert page.locator("form[action='/accounts/logout/']").count() == 1  # the host's own logout

        client = person.api(host, "/", host.manage("june", "token", "alice").strip())
        person.features(client)
        parked = client.post("api/agents/clerk/sessions/s2/turns", json={"text": "refund order 1 5"}).json()
        assert parked["status"] == "suspended", parked
        operator = new_context(host.base).new_page()
        person.approve_in_admin(operator, "/admin/", parked["turn_id"])
        done = person.wait_status(client, f"api/agents/clerk/sessions/s2/turns/{parked['turn_id']}", "completed")
        assert done == "completed"

        # the agent's schedule, run now from the admin: a turn in alice's session
        person.run_schedule_now(operator, "/admin/")
        turns = person.wait_turns(client, "api/agents/clerk/sessions/stocktake/")
        assert [t["status"] for t in turns] == ["completed"], turns
    except BaseException:
        print(host.logs())
        raise
    finally:
        host.stop()
