"""A worker SIGKILLed during an MCP call (a real qcluster, a real stdio MCP server): the next
attempt sends the call again with the same idempotency key in ``_meta``; the server sees the key
twice, dedupes, and the turn completes with the model reading the server's answer."""

from __future__ import annotations

import pytest

from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_killed_during_an_mcp_call_retries_it_with_the_same_key(clusters, fault_agent):
    from sessions_app.models import Message, Turn

    first = clusters.start()
    clusters.arm("mcp:during")
    turn_id = start_turn("mcpfault", "mcp-killed", text="charge")
    clusters.reached("mcp:during")
    first.kill()
    clusters.disarm("mcp:during")
    clusters.start()
    assert wait_final(turn_id) == "completed"
    keys = (clusters.fault_dir / f"mcpkeys-{turn_id}").read_text().splitlines()
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0] not in ("", "None"), keys
    tool = Message.objects.get(turn_id=turn_id, role="tool")
    assert '"charged": false' in Turn.objects.get(pk=turn_id).text, "the retry was deduped by its key"
    assert tool.data["result"]
    assert Turn.objects.get(pk=turn_id).attempts == 2
