"""Services end to end with django-q2 in sync mode (the task runs inline on commit)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from agents_app.models import Order
from agents_app.runtime.errors import NotFound, SessionSuspendedError
from sessions_app import models as m
from sessions_app import services
from sessions_app.site_errors import AccessDenied, BadRequest, PayloadTooLarge

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def bob():
    return get_user_model().objects.create_user("bob", password="pw-bob-123")


def test_a_turn_runs_through_the_task_and_writes_its_order_once(q2_sync, alice):
    rec = services.turn_start(agent="ops", key="s1", text="order blue mugs", user=alice)
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "completed", turn.error
    assert list(Order.objects.values_list("item", flat=True)) == ["blue mugs"]
    roles = list(m.Message.objects.filter(session=turn.session).order_by("index").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant"]
    types = list(m.Event.objects.filter(session=turn.session).order_by("seq").values_list("type", flat=True))
    assert types == [
        "turn.started",
        "message.completed",
        "action.requested",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    assert turn.session.owner == alice and turn.session.status == "idle"
    assert turn.input["user"] == {"id": str(alice.pk), "name": "alice", "attested": True}


def test_the_demo_reads_a_leading_number_as_the_quantity(q2_sync, alice):
    """``order 2 blue mugs`` (the README's example) orders 2 of "blue mugs"; a number out of the
    tool's range stays part of the item."""
    for key, text in (("q1", "order 2 blue mugs"), ("q2", "order 5000 screws"), ("q3", "order 12")):
        assert (
            m.Turn.objects.get(pk=services.turn_start(agent="ops", key=key, text=text, user=alice).turn_id).status
            == "completed"
        )
    assert list(Order.objects.order_by("pk").values_list("item", "quantity")) == [
        ("blue mugs", 2),
        ("5000 screws", 1),
        ("12", 1),
    ]


def test_another_users_session_is_refused(q2_sync, alice, bob):
    services.turn_start(agent="ops", key="mine", text="hello", user=alice)
    with pytest.raises(AccessDenied):
        services.turn_start(agent="ops", key="mine", text="hello", user=bob)
    with pytest.raises(AccessDenied):
        services.session_reset(agent="ops", key="mine", user=bob)


def test_bad_input_is_refused_before_anything_is_written(alice):
    with pytest.raises(BadRequest):
        services.turn_start(agent="ops", key="s1", text="   ", user=alice)
    with pytest.raises(PayloadTooLarge):
        services.turn_start(agent="ops", key="s1", text="x" * 40_000, user=alice)
    with pytest.raises(BadRequest):
        services.turn_start(agent="ops", key="bad key/", text="hi", user=alice)
    with pytest.raises(NotFound):
        services.turn_start(agent="nope", key="s1", text="hi", user=alice)
    assert m.Turn.objects.count() == 0


def test_refund_parks_and_an_operator_answers(q2_sync, alice):
    from django.contrib.auth.models import Group

    operator = get_user_model().objects.create_user("olga", password="pw-olga-123", is_staff=True)
    operator.groups.add(Group.objects.create(name="operators"))
    rec = services.turn_start(agent="ops", key="r1", text="refund order 42 10", user=alice)
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended" and turn.session.status == "suspended"
    with pytest.raises(SessionSuspendedError):
        services.turn_start(agent="ops", key="r1", text="another", user=alice)
    from agents_app.runtime.errors import ResumeAuthorizationError

    with pytest.raises(ResumeAuthorizationError):  # the speaker is not an operator
        services.turn_resume(turn_id=turn.pk, input_id="approve-refund", answer=True, user=alice)
    assert services.may_answer(turn=turn, user=operator) and not services.may_answer(turn=turn, user=alice)
    services.turn_resume(
        turn_id=turn.pk, input_id="approve-refund", answer=True, user=operator, check_session_access=False, via="admin"
    )
    turn.refresh_from_db()
    assert turn.status == "completed", turn.error
    assert m.Answer.objects.get(turn=turn).by == str(operator.pk)


def test_service_calls_from_a_plain_thread_leave_its_context_as_they_found_it(alice):
    """A service call from a thread with no event loop (a django-q2 task, a schedule, a WSGI
    server, a management command) runs the runtime through ``async_to_sync``, on a new thread
    each time, whose Django connection handle (a thread-critical ``Local``) adds a context
    variable there; asgiref copies the call's variables back into the caller's context. It grew
    by one variable per call, for good, and every later hop between sync and async code on
    that thread copies them all (asgiref's ``_restore_context``)."""
    import contextvars
    import threading

    sizes: list[int] = []

    def calls() -> None:
        for n in range(12):
            services.turn_start(agent="ops", key=f"plain{n}", text="hello", user=alice)
            sizes.append(len(contextvars.copy_context()))

    thread = threading.Thread(target=calls)
    thread.start()
    thread.join(60)
    assert len(sizes) == 12 and m.Turn.objects.filter(session__key__startswith="plain").count() == 12
    assert sizes[-1] == sizes[1], sizes  # the first call may set what every call shares
