"""``june.testing``'s ``june`` fixture (the pytest11 plugin, loaded by this suite as by any
project that installs June) on the site's own ``ops`` agent: scripted replies, a ``def`` tool's
row in the test's transaction or committed, a crash on each side of the tool's unit, a cancel
of a queued turn, a conversation of two turns."""

from __future__ import annotations

import os
import re

import pytest

from agents_app.models import Order
from june.testing import ModelRequest, reply

ORDER = [reply("", ("create_order", {"item": "mug", "quantity": 2})), reply("Ordered.")]


@pytest.mark.django_db
def test_the_fixture_comes_from_the_entry_point(request):
    plugin = request.config.pluginmanager.get_plugin("june")
    assert plugin is not None and plugin.__name__ == "june.testing.plugin"


@pytest.mark.django_db
def test_a_def_tools_row_is_in_the_tests_transaction(june):
    turn = june.run("ops", "order 2 mugs", model=ORDER)

    assert (turn.status, turn.text) == ("completed", "Ordered.")
    order = Order.objects.get()
    assert turn.calls("create_order")[0].result["order_id"] == order.pk
    assert turn.units == [] and turn.crashes == 0  # no plan: nothing counted


@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_sees_the_committed_row(june):
    turn = june.run("ops", "order 2 mugs", model=ORDER)

    assert turn.status == "completed"
    assert Order.objects.filter(turn_id=turn.turn_id).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["crash_after", "crash_before"])
@pytest.mark.parametrize("point", ["create_order", 2, 3])
def test_a_crash_at_any_unit_leaves_one_order(june, where, point):
    turn = june.run("ops", "order 2 mugs", model=ORDER, **{where: point})

    assert turn.status == "completed" and turn.crashes == 1
    assert Order.objects.count() == 1
    assert turn.event_types.count("turn.completed") == 1


@pytest.mark.django_db
def test_a_function_script_sees_the_request(june):
    seen: list[ModelRequest] = []

    def script(request: ModelRequest):
        seen.append(request)
        return reply(f"you said {request.messages[-1].text}")

    first = june.run("ops", "hello", model=script)
    second = june.run("ops", "again", model=script)

    assert (first.text, second.text) == ("you said hello", "you said again")
    assert [m.text for m in seen[1].messages if str(m.role) == "user"] == ["hello", "again"]
    assert second.usage["model_calls"] == 1 and second.session == first.session == "test"


@pytest.mark.django_db
def test_a_queued_turn_is_cancelled(june):
    turn = june.start("ops", "order 2 mugs", model=ORDER)
    assert turn.status == "queued"

    turn = turn.cancel()
    assert turn.status == "cancelled" and not Order.objects.exists()


@pytest.mark.django_db
def test_a_string_is_a_reply_and_anything_else_is_named(june):
    # a plain string, as the evals' script files take them (it failed the turn with "retry
    # budget exhausted after 5 attempts")
    turn = june.run("ops", "hello", model=["Hello there."])
    assert (turn.status, turn.text) == ("completed", "Hello there.")
    turn = june.run("ops", "hello", model=lambda request: "From a function.", session="fn")
    assert (turn.status, turn.text) == ("completed", "From a function.")

    with pytest.raises(TypeError, match=r"^reply 2 is 42: a script's reply is reply\(text"):
        june.run("ops", "hello", model=["one", 42])
    with pytest.raises(TypeError, match="model= is a list of replies, a function of the request or a model"):
        june.run("ops", "hello", model="Hello there.")
    turn = june.run("ops", "hello", model=lambda request: {"text": "x"}, session="bad")
    assert turn.status == "failed" and "the script's reply is {'text': 'x'}" in turn.error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "plan, error",
    [
        ({"crash_after": "create_ordr"}, "ops has no tool named 'create_ordr' to crash or cancel at (its tools: "),
        ({"crash_before": 0}, "a unit number from 1 or a tool's name, not 0"),
        ({"cancel_after": True}, "a unit number from 1 or a tool's name, not True"),
    ],
)
def test_a_plan_that_could_never_strike_is_refused(june, plan, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        june.run("ops", "order 2 mugs", model=ORDER, **plan)
    assert not Order.objects.exists()  # refused before the turn started


def test_without_pytest_django_the_fixture_says_what_it_needs(tmp_path):
    """A project whose pytest has no pytest-django (here: turned off) gets what to install, not
    pytest's "fixture 'db' not found" below a listing of every fixture."""
    import subprocess
    import sys

    (tmp_path / "test_clerk.py").write_text("def test_it(june):\n    june.run('clerk', 'hi')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:django", "-p", "no:cacheprovider", "test_clerk.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout[-2000:]
    assert "the june fixture runs turns on pytest-django's test database: install pytest-django" in out.stdout
    assert "fixture 'db' not found" not in out.stdout


@pytest.mark.django_db
def test_a_turn_parked_on_an_answer_is_answered_not_cancelled(june):
    """docs/testing.md said ``turn.cancel()`` cancels "a queued or parked turn"; the site's rule
    (the same in the tester) keeps a question from being thrown away: its cancel is a 409."""
    from june.testing import TurnConflictError

    refund = [reply("", ("issue_refund", {"order_id": "A1", "amount": 5})), reply("Refunded.")]
    turn = june.run("ops", "refund A1", model=refund)
    assert turn.status == "suspended"
    with pytest.raises(TurnConflictError, match="waiting for an answer"):
        turn.cancel()
    assert turn.refresh().status == "suspended"
