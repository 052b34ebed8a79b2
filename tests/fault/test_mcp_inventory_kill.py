"""The demo inventory's dedupe across a worker's crash (a real qcluster, the demo's stdio MCP
server): the worker is SIGKILLed after the server reserved and before June recorded the answer;
its server process dies with it, and the retry reaches a new server process (another pid), which
finds the idempotency key in the inventory's file and reserves nothing again."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reservation_retried_after_a_crash_reaches_a_new_server_and_is_deduped(clusters, fault_agent):
    """The demo's dedupe was a dict in the server process: the retry after a crash reached a new
    process with empty memory and reserved twice (tea 40 -> 34)."""
    from sessions_app.models import Turn

    first = clusters.start()
    _warm_up()
    clusters.arm("inventory:after")
    turn_id = start_turn("mcpinventory", "inventory-killed", text="reserve")
    clusters.reached("inventory:after")
    first.kill()
    clusters.disarm("inventory:after")
    clusters.start()
    assert wait_final(turn_id) == "completed"
    pids = (clusters.fault_dir / "inventory-pids").read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1], pids  # two server processes, one call each
    answer = json.loads(Turn.objects.get(pk=turn_id).text.removeprefix("outcome: "))
    assert answer["result"] == {"item": "tea", "reserved": 3, "left": 37, "deduplicated": True}, answer
    with sqlite3.connect(clusters.fault_dir / "inventory.sqlite3") as db:
        assert db.execute("SELECT quantity FROM stock WHERE item = 'tea'").fetchone() == (37,)
    assert Turn.objects.get(pk=turn_id).attempts == 2


def _warm_up() -> None:
    """Turns that count tea until one reads the server's answer: the worker's server process is
    up and its tool list fetched (a turn's start waits at most 10 s for a list, and a Python
    process importing ``mcp`` took longer than that on this loaded machine)."""
    from sessions_app.models import Turn

    deadline = time.monotonic() + 120
    for n in range(1, 1000):
        turn_id = start_turn("mcpinventory", f"inventory-warm-{n}", text="count")
        assert wait_final(turn_id) == "completed"
        if '"in_stock": 40' in Turn.objects.get(pk=turn_id).text:
            return
        assert time.monotonic() < deadline, "the inventory server never answered a count"
