"""Refusals a person reads (the chat's approval card, the admin's answer page, the API's error)
say what was refused and what to do, in words: they named the turn by its raw id ("turn
3f9c…e1 is not waiting for an answer"), which tells a person nothing."""

from __future__ import annotations

import pytest

from agents_app.runtime.errors import JuneError
from sessions_app import models as m
from sessions_app import services

from .test_api import inline_worker, make_user  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def staff(name: str):
    user = make_user(name, operator=True)
    user.is_staff = True
    user.save()
    return user


def refusal(**kwargs) -> str:
    with pytest.raises(JuneError) as caught:
        services.turn_resume(check_session_access=False, **kwargs)
    return str(caught.value)


def parked(key: str) -> tuple[m.Turn, str]:
    services.turn_start(agent="ops", key=key, text="refund order 42 10", user=None, source="cli")
    turn = m.Turn.objects.get(session__key=key)
    assert turn.status == "suspended", turn.status
    return turn, turn.pending["request"]["id"]


def test_answering_a_request_nothing_waits_on_says_so_in_words(inline_worker):
    operator = staff("olga")
    turn, input_id = parked("r-1")
    services.turn_resume(turn_id=turn.pk, input_id=input_id, answer=False, user=operator, check_session_access=False)
    said = refusal(turn_id=turn.pk, input_id=input_id, answer=True, user=operator)
    assert turn.pk not in said and "answered" in said, said


def test_answering_a_request_of_a_reset_conversation_says_so_in_words(inline_worker):
    operator = staff("olga")
    turn, input_id = parked("r-2")
    services.session_reset(agent="ops", key="r-2")
    said = refusal(turn_id=turn.pk, input_id=input_id, answer=True, user=operator)
    assert turn.pk not in said and "answered" in said, said


def test_answering_another_request_than_the_open_one_says_so_in_words(inline_worker):
    operator = staff("olga")
    turn, input_id = parked("r-3")
    said = refusal(turn_id=turn.pk, input_id="elsewhere", answer=True, user=operator)
    assert turn.pk not in said and "reload" in said, said


def test_a_turn_not_in_the_session_is_refused_in_words(inline_worker):
    turn, _ = parked("r-4")
    with pytest.raises(JuneError) as caught:
        services.turn_cancel(turn_id=turn.pk, agent="ops", key="elsewhere")
    assert turn.pk not in str(caught.value), caught.value
