"""docs/install.md, executed: a host project built from the page's blocks, in order, on the
suite's backend (SQLite, or PostgreSQL + Redis), then used as a person uses it.

It pins what a developer following the page hit: the settings block failing on ``DATABASES``
(pasted above it), ``makemigrations`` and ``STATIC_ROOT`` missing, no login page for an ordinary
user, daphne serving no static files (the chat stuck on "connecting…"), the API's docs page
without Swagger UI's files, the host's agent suggesting the demo's commands, and the page's
tool keyed on ``ctx.call_id`` (the same in every turn). It prints the developer's time to a first
answer (the page's commands, then the processes, then the first turn) and the lines pasted:
docs/install.md quotes both."""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from pathlib import Path

import httpx
import pytest

from tests.install import page, person
from tests.install.conftest import FIGURES, on_postgres
from tests.install.host import Host

# a whole project built and driven: minutes on a loaded machine, not the suite's 300 s default
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(900)]


def purchases(host: Host) -> list[dict]:
    out = host.manage(
        "shell",
        "-c",
        "import json; from shop.models import Purchase; print(json.dumps(list(Purchase.objects.values())))",
    )
    return json.loads(out.strip().splitlines()[-1])


def test_the_install_page_builds_a_working_site(host_database, new_context):
    host = Host(tags={"api", *(["postgres"] if on_postgres() else [])}, database_url=host_database)
    try:
        host.build()
        host.start()
        person.make_user(host)

        # an ordinary user logs in through the page the docs give, and chats
        context = new_context(host.base)
        browser = context.new_page()
        static = person.watch_static(browser)
        person.log_in(browser, "/assistant/", "/assistant/login/", "alice", person.USER["password"])
        reply, answered = person.chat(browser, "/assistant/", "clerk", "order 2 mugs")
        assert "create_order" in reply, reply
        host.timings["the first turn, sent to answered"] = answered
        assert browser.locator("#text").get_attribute("placeholder").startswith("Ask the clerk")
        assert static and all(status in (200, 304) for _, status in static), static
        assert {"june.css", "main.js", "markdown-it.js"} <= {url.rsplit("/", 1)[-1] for url, _ in static}

        # the page's API example, as written (its token, its curl)
        out = host.run(host.text(host.api_block), what="the API example")
        turn = json.loads(out.strip().splitlines()[-1])
        assert turn["status"] == "completed", turn
        rows = purchases(host)
        assert len(rows) == 2 and {r["item"] for r in rows} == {"mugs"} and all(r["quantity"] == 2 for r in rows)
        assert len({r["idempotency_key"] for r in rows}) == 2  # one row per call, across turns

        # startproject's SQLite settings (June's options applied) under a burst of turn starts:
        # startproject's bare options refused 17 of 25 with a 503 "database is locked"
        person.make_user(host, {"username": "carol", "email": "carol@example.com", "password": "carol-pw-7730"})
        burst = person.api(host, "/assistant/", host.manage("june", "token", "carol").strip())
        with concurrent.futures.ThreadPoolExecutor(25) as pool:
            codes = list(
                pool.map(
                    lambda i: (
                        burst.post(
                            f"api/agents/clerk/sessions/b{i}/turns?wait=false", json={"text": "order 1 tea"}
                        ).status_code
                    ),
                    range(25),
                )
            )
        assert codes == [202] * 25, codes
        deadline = time.monotonic() + 120
        while len(rows := purchases(host)) < 27 and time.monotonic() < deadline:
            time.sleep(1)
        assert len(rows) == 27, f"{len(rows) - 2} of the burst's 25 purchases written"

        # the API's docs page, with Swagger UI's files
        person.swagger(browser, "/assistant/")
        assert all(status in (200, 304) for _, status in static), static

        # a refund parks for staff; the operator approves it in the admin's inbox
        token = re.search(r"TOKEN=\$\((.*)\)", host.text(host.api_block))[1]
        client = person.api(host, "/assistant/", host.run(token, timed=False).strip())
        parked = client.post("api/agents/clerk/sessions/s2/turns", json={"text": "refund order 1 5"}).json()
        assert parked["status"] == "suspended", parked
        operator = new_context(host.base).new_page()
        person.approve_in_admin(operator, "/admin/", parked["turn_id"])
        turn_path = f"api/agents/clerk/sessions/s2/turns/{parked['turn_id']}"
        assert person.wait_status(client, turn_path, "completed") == "completed"
        person.features(client)  # attachments, search, a fork, export
        assert httpx.get(host.base + "/healthz").status_code == 200
    except BaseException:
        print(host.logs())
        raise
    finally:
        host.stop()

    first_answer = sum(seconds for what, seconds in host.timings.items() if what not in ("the API example",))
    lines = [f"docs/install.md on {'PostgreSQL + Redis' if on_postgres() else 'SQLite'}:"]
    lines += [f"  {seconds:6.1f} s  {what}" for what, seconds in host.timings.items()]
    lines.append(f"  time to a first answer: {first_answer:.1f} s; lines pasted or typed: {host.pasted}")
    lines.append(f"  load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print("\n" + "\n".join(lines))
    FIGURES.extend(lines)
    quoted = f"({host.pasted} on PostgreSQL)" if on_postgres() else f"**{host.pasted} lines**"
    assert quoted in page.PAGE.read_text(), f"docs/install.md does not quote the lines pasted: {quoted}"


def test_the_page_is_all_marked_blocks():
    """Every code block a developer copies is one the test applies (an unmarked one would be
    a step nobody runs)."""
    text = page.PAGE.read_text()
    fenced = len(re.findall(r"^```\w", text, re.M))
    assert fenced == len(page.blocks()), "a fenced block of docs/install.md has no june-install marker"
