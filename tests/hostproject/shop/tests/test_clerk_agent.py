"""The shop's own tests of its clerk agent, written as a host team writes them: pytest-django
and June's ``june`` fixture (docs/testing.md), scripted model replies, the shop's own models."""

import pytest
from django.contrib.auth import get_user_model
from hostproject.shop.models import Purchase

from june.testing import ResumeAuthorizationError, reply

pytestmark = pytest.mark.django_db

ORDER_TWO_MUGS = [
    reply("", ("create_order", {"item": "mug", "quantity": 2})),
    reply("Ordered 2 mugs."),
]


def test_the_clerk_records_an_order_in_the_shops_table(june):
    turn = june.run("clerk", "order 2 mugs", model=ORDER_TWO_MUGS)

    assert turn.status == "completed"
    assert turn.text == "Ordered 2 mugs."
    [call] = turn.calls("create_order")
    assert call.input == {"item": "mug", "quantity": 2}
    purchase = Purchase.objects.get()  # the tool's row, in this test's transaction
    assert call.result == {"purchase_id": purchase.pk}
    assert (purchase.item, purchase.quantity, purchase.turn_id) == ("mug", 2, turn.turn_id)
    assert turn.event_types[0] == "turn.started" and turn.event_types[-1] == "turn.completed"
    # what the model was sent the second time: the tool's result
    assert turn.model_requests[1].messages[-1].result == {"purchase_id": purchase.pk}


def test_a_failing_tool_leaves_no_row_and_the_model_hears_the_error(june):
    turn = june.run("clerk", "try the till", model=[reply("", ("flaky", {})), reply("The till is jammed.")])

    assert turn.status == "completed"
    [call] = turn.calls("flaky")
    assert call.is_error and "the till jammed" in call.result["error"]
    assert not Purchase.objects.exists()


def test_the_order_is_recorded_once_when_the_process_dies_after_the_tool(june):
    turn = june.run("clerk", "order 2 mugs", model=ORDER_TWO_MUGS, crash_after="create_order")

    assert turn.crashes == 1 and turn.status == "completed"
    assert Purchase.objects.count() == 1  # the redelivery did not run the tool again


def test_the_order_is_recorded_once_when_the_process_dies_inside_the_tools_step(june):
    turn = june.run("clerk", "order 2 mugs", model=ORDER_TWO_MUGS, crash_before="create_order")

    assert turn.crashes == 1 and turn.status == "completed"
    assert Purchase.objects.count() == 1  # the first write rolled back with its step; the replay's stays


def test_a_refund_waits_for_staff_and_goes_through_once_they_approve(june):
    Member = get_user_model()
    customer = Member.objects.create_user("ada@example.com")
    staff = Member.objects.create_user("bo@example.com", is_staff=True)
    refund = [reply("", ("issue_refund", {"order_id": "A1", "amount": 5})), reply("Refunded.")]

    turn = june.run("clerk", "refund A1", model=refund, user=customer)
    assert turn.status == "suspended"
    assert turn.request["prompt"] == "Refund 5 on A1?"

    with pytest.raises(ResumeAuthorizationError):  # the customer is not staff
        turn.approve(user=customer)
    turn = turn.approve(operator=staff)

    assert turn.status == "completed" and turn.text == "Refunded."
    assert turn.calls("issue_refund")[0].result == {"refunded": True}


def test_a_cancel_stops_the_turn_before_its_next_step(june):
    turn = june.run("clerk", "order 2 mugs", model=ORDER_TWO_MUGS, cancel_after="create_order")

    assert turn.status == "cancelled"
    assert Purchase.objects.count() == 1  # the step that ran stays done
    assert len(turn.model_requests) == 1  # the model was not asked again


def test_the_clerk_answers_as_its_recorded_model_did(june):
    # recorded once from the clerk's own model (``pytest --june-record``), replayed from
    # shop/tests/cassettes/test_clerk_agent/ on every run since
    turn = june.run("clerk", "hello, what can you do?", model=june.cassette())

    assert turn.status == "completed"
    assert turn.text == "You said: hello, what can you do?"
    assert turn.usage["input_tokens"] == 20  # what the recorded reply cost
