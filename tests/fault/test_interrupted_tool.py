"""An async tool that opted into ``on_interrupt="report"`` (seed 003's repair), killed with its
worker while it runs: the next attempt does not run it again, records the interrupted marker as
its result, the model reads it, and the worker's log names the tool."""

from __future__ import annotations

import pytest

from .qcluster import wait_for
from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_killed_opted_in_async_tool_is_reported_to_the_model_not_rerun(clusters, fault_agent):
    """Pins issue 13 item 14: the interrupted-tool marker was tested only on the in-memory store
    and no log named the interrupted tool. SIGKILL inside ``fault_charge`` on a real qcluster."""
    from sessions_app.models import Message, Turn

    first = clusters.start()
    clusters.arm("charge:during")
    turn_id = start_turn(fault_agent, "interrupted", text="charge")
    clusters.reached("charge:during")
    turn = Turn.objects.get(pk=turn_id)
    assert turn.phase == "tool_request_recorded" and turn.journal["tool_request"]["name"] == "fault_charge"
    first.kill()
    clusters.disarm("charge:during")
    taker = clusters.start()
    assert wait_final(turn_id) == "completed"
    assert clusters.count("charge", turn_id) == 1, "the opted-in tool was not run again"
    tool = Message.objects.get(turn_id=turn_id, role="tool")
    assert tool.data["result"]["interrupted"] is True and tool.data.get("is_error") is True
    turn = Turn.objects.get(pk=turn_id)
    assert turn.text == "outcome: interrupted", "the model read the marker"
    assert turn.attempts == 2
    wait_for(
        lambda: "async tool fault_charge (call c1) was interrupted" in taker.output(),
        timeout=10,
        what="the worker's log line naming the tool",
    )
