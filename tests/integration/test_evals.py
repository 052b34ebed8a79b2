"""Evals (june_evals) on the site's services, with the turns driven in this process as a worker
would (``tasks.run_turn``): the demo dataset passes on the demo model; the same agent with the
demo's changed instructions fails the one case it breaks; each case is scored once; the admin
shows the run side by side and exports it; staff make cases of sessions; JSONL is validated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from june_evals import driver
from june_evals.datasets import dataset_load, read_jsonl
from june_evals.models import Dataset, EvalCase, Example
from sessions_app import models as m
from sessions_app import services
from sessions_app.site_errors import BadRequest
from sessions_app.workers import tasks

pytestmark = pytest.mark.django_db(transaction=True)
DEMO = Path(driver.__file__).parent / "demo"


def drive_here(run, rounds: int = 20) -> None:
    """``run_step`` until done, the started turns driven in this process between steps."""
    for _ in range(rounds):
        if driver.run_step(run=run):
            return
        for case in EvalCase.objects.filter(run=run, turn_id__isnull=False, scored_at__isnull=True):
            if m.Turn.objects.filter(pk=case.turn_id, status="queued").exists():
                tasks.run_turn(case.turn_id)
    raise AssertionError("the run did not finish")


def test_the_demo_dataset_passes_and_the_changed_instructions_break_one_case():
    dataset = dataset_load(path=DEMO / "ops.jsonl")
    changed = (DEMO / "ops_ask_first.md").read_text()
    run = driver.run_start(
        dataset=dataset,
        versions=[driver.version("ops", label="A"), driver.version("ops", instructions=changed, label="B")],
        concurrency=4,
    )
    drive_here(run)

    a, b = driver.totals(run)
    assert (a["passed"], a["cases"]) == (6, 6), [c.scores for c in EvalCase.objects.filter(run=run, passed=False)]
    assert (b["passed"], b["cases"]) == (5, 6)
    [broken] = EvalCase.objects.filter(run=run, passed=False)
    assert broken.version == 1 and broken.example.name == "order mugs"
    assert broken.text.startswith("Shall I go ahead")
    # B's turns ran with B's instructions (kept in the turn's policy), A's with the folder's
    assert m.Turn.objects.get(pk=broken.turn_id).policy["system"] == changed
    assert a["input_tokens"] > 0


def test_a_case_is_scored_once_whoever_scores_it():
    dataset = Dataset.objects.create(name="once")
    Example.objects.create(dataset=dataset, input="hello", expect={"equals": "You said: hello"})
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops")])
    driver.run_step(run=run)
    case = EvalCase.objects.get(run=run)
    tasks.run_turn(case.turn_id)
    case.refresh_from_db()
    turn = m.Turn.objects.get(pk=case.turn_id)
    outcome = driver.outcome_of(case, turn, "ops")
    assert driver._write_score(case, outcome, []) is True
    assert driver._write_score(case, {**outcome, "text": "again"}, []) is False  # the second is dropped
    assert driver.run_step(run=run) is True
    case.refresh_from_db()
    assert case.text == "You said: hello" and case.passed is True


def test_the_admin_shows_the_run_side_by_side_and_exports_it(client):
    dataset = dataset_load(path=DEMO / "ops.jsonl")
    changed = (DEMO / "ops_ask_first.md").read_text()
    run = driver.run_start(
        dataset=dataset, versions=[driver.version("ops"), driver.version("ops", instructions=changed, label="B")]
    )
    drive_here(run)
    staff = get_user_model().objects.create_user("eve", password="pw", is_staff=True)
    nobody = get_user_model().objects.create_user("mallory", password="pw")

    client.force_login(nobody)
    assert client.get(f"/admin/june_evals/evalrun/{run.pk}/change/").status_code == 302  # to the login
    client.force_login(staff)
    page = client.get(f"/admin/june_evals/evalrun/{run.pk}/change/").content.decode()
    assert page.count('class="pass"') == 11 and page.count('class="fail"') == 1
    assert "<del>" in page and "<ins>" in page  # the word diff of the answers A and B gave
    assert 'class="changed"' in page
    rows = [json.loads(line) for line in client.get(f"/admin/june_evals/evalrun/{run.pk}/export/").content.splitlines()]
    assert len(rows) == 12 and {r["version"] for r in rows} == {"ops", "B"}
    csv = client.get(f"/admin/june_evals/evalrun/{run.pk}/export/?format=csv").content.decode()
    assert csv.splitlines()[0].startswith("run,example,name,input,attachments,version,status,passed")

    # a run started from the dataset's page is queued for the workers' tick
    start = client.post(f"/admin/june_evals/dataset/{dataset.pk}/run/", {"agent": "ops", "concurrency": 2})
    assert start.status_code == 302 and "/admin/june_evals/evalrun/" in start["Location"]


def test_staff_make_cases_of_chosen_sessions(client):
    user = get_user_model().objects.create_user("ann", password="pw")
    services.turn_start(agent="ops", key="chat-1", text="hello there", user=user)
    session = m.Session.objects.get(key="chat-1")
    tasks.run_turn(m.Turn.objects.get(session=session).pk)
    staff = get_user_model().objects.create_user("eve", password="pw", is_staff=True, is_superuser=True)
    client.force_login(staff)

    reply = client.post("/admin/sessions_app/session/", {"action": "make_eval_cases", "_selected_action": [session.pk]})
    assert reply.status_code == 302
    [example] = Example.objects.all()
    assert example.input == "hello there" and example.expect == {"reference": "You said: hello there"}
    assert example.source == f"ops/chat-1#g{session.generation}"

    # a run used it; then the user is erased: the case and its scored rows go with their data
    run = driver.run_start(dataset=example.dataset, versions=[driver.version("ops")])
    drive_here(run)
    from sessions_app.privacy import user_erase

    report = user_erase(user=user)
    assert report["eval_examples"] == 1 and report["eval_run_cases"] == 1
    assert not Example.objects.exists() and not EvalCase.objects.exists()


@pytest.mark.parametrize(
    "line, error",
    [
        ("not json", "line 1: not JSON"),
        ('{"input": ""}', "non-empty string 'input'"),
        ('{"input": "x", "extra": 1}', "unknown keys ['extra']"),
        ('{"input": "x", "expect": []}', "'expect' is an object"),
        ('{"input": "x", "attachments": [1]}', "line 1: 'attachments' is a list of files"),
        (
            '{"input": "x", "expect": {"contain": "x"}}',
            "line 1: unknown expectation 'contain' (did you mean 'contains'?)",
        ),
        ('{"input": "x", "expect": {"tool_calls": "create_order"}}', "line 1: tool_calls: a list of"),
        ('{"input": "x", "expect": {"regex": "(a"}}', "line 1: regex: bad pattern"),
    ],
)
def test_a_bad_jsonl_line_is_a_clear_error(line, error):
    with pytest.raises(BadRequest, match=re.escape(error)):
        read_jsonl([line])


def test_the_docs_dataset_lines_are_the_demos():
    page = (Path(__file__).resolve().parents[2] / "docs" / "evals.md").read_text()
    shown = page.split("The demo's, `june_evals/demo/ops.jsonl`:\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    demo = (DEMO / "ops.jsonl").read_text().splitlines()
    assert shown and all(line in demo for line in shown)


def test_the_judge_asks_the_agents_own_model():
    """The demo model echoes instead of judging: its reply, not PASS, fails the case, and the
    reason shown is what the judge said."""
    from june_evals.judge import judge_for

    verdict = judge_for("ops")("Is the answer polite?", {"input": "hi", "text": "hello", "reference": "hey"})
    assert verdict.name == "judge" and not verdict.passed
    assert verdict.detail.startswith("You said: Input:")


def test_a_case_that_parked_leaves_no_request_waiting_once_scored():
    """An eval has nobody to answer a parked request: its case is scored as it stands. The turn
    stayed parked for ever, an actionable "Approve a $12.50 refund?" in the operators' approval
    inbox (requested by "inbound"), counted on the admin index and the dashboard, and notified:
    an operator's Approve would have run the refund of a test case."""
    from sessions_app.admin.inbox import parked_turns
    from sessions_app.notify.outbox import notify_parks

    dataset = Dataset.objects.create(name="parks")
    Example.objects.create(dataset=dataset, input="refund order 7 12.50", expect={"status": "suspended"})
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops")])
    drive_here(run)

    case = EvalCase.objects.get(run=run)
    assert case.passed is True and case.status == "suspended"
    turn = m.Turn.objects.get(pk=case.turn_id)
    assert turn.status == "cancelled", turn.status
    assert not parked_turns().filter(pk=turn.pk).exists()
    assert notify_parks() == 0


def test_a_case_that_parks_never_waits_in_the_inbox_before_it_is_scored():
    """Between its park and the driver's next tick (the workers' eval tick: seconds) a parked
    case was listed in the operators' approval inbox, counted, and notified: an operator's
    Approve there would have run a test case's refund. An eval run's turns wait for no person:
    they are never listed, counted nor notified, and the tick scores them as they stand."""
    from sessions_app.admin.inbox import parked_turns, waiting_count
    from sessions_app.notify.outbox import notify_parks

    dataset = Dataset.objects.create(name="parks soon")
    Example.objects.create(dataset=dataset, input="refund order 7 12.50", expect={"status": "suspended"})
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops")])
    driver.run_step(run=run)  # started
    case = EvalCase.objects.get(run=run)
    tasks.run_turn(case.turn_id)  # parked; scored at the next step
    assert m.Turn.objects.get(pk=case.turn_id).status == "suspended"
    operator = get_user_model().objects.create_user("olga", password="pw", is_staff=True, is_superuser=True)
    assert not parked_turns().filter(pk=case.turn_id).exists()
    assert waiting_count(operator) == 0 and notify_parks() == 0
    drive_here(run)
    assert EvalCase.objects.get(run=run).passed is True


def test_cases_made_of_a_branched_session_keep_every_message_and_its_files():
    """A session whose last reply was regenerated: its live branch holds a copy of the messages
    before the fork, whose turns are the parent branch's. Only the branch's own turns became cases
    (the messages before the fork were lost), and the regenerated message's file was not copied
    (the upload belongs to the turn that first sent it)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from june_evals.datasets import examples_from_sessions
    from sessions_app import attachment_services
    from tests.attachment_files import png

    user = get_user_model().objects.create_user("ann", password="pw")
    services.turn_start(agent="ops", key="b-1", text="hello there", user=user)
    upload = attachment_services.attachment_upload(
        agent="ops", key="b-1", user=user, upload=SimpleUploadedFile("red.png", png(), "image/png")
    )
    services.turn_start(agent="ops", key="b-1", text="see this", user=user, attachments=[upload.id])
    for turn in m.Turn.objects.filter(session__key="b-1", status="queued").order_by("order"):
        tasks.run_turn(turn.pk)
    second = m.Turn.objects.get(session__key="b-1", input__text="see this")
    again = services.turn_regenerate(agent="ops", key="b-1", turn_id=second.pk, user=user)
    tasks.run_turn(again.turn_id)

    dataset = Dataset.objects.create(name="from sessions")
    session = m.Session.objects.get(key="b-1")
    assert session.generation != 0  # the regenerated branch is live
    assert examples_from_sessions(dataset=dataset, sessions=[session]) == 2
    hello, see = Example.objects.filter(dataset=dataset).order_by("pk")
    assert (hello.input, see.input) == ("hello there", "see this")
    assert [f.name for f in see.files.all()] == ["red.png"] and not hello.files.exists()


def test_making_cases_twice_adds_each_message_once_and_skips_the_evals_own_sessions(client):
    """ "Make eval cases" chosen twice made every case twice, and with every session selected it
    made cases of the eval runs' own sessions too (the cases' inputs again, under their keys). A
    turn is made a case once now, and an eval run's sessions are skipped; the message says so."""
    user = get_user_model().objects.create_user("ann", password="pw")
    services.turn_start(agent="ops", key="chat-1", text="hello there", user=user)
    session = m.Session.objects.get(key="chat-1")
    tasks.run_turn(m.Turn.objects.get(session=session).pk)
    dataset = Dataset.objects.create(name="small")
    Example.objects.create(dataset=dataset, input="say hi", expect={"contains": "hi"})
    drive_here(driver.run_start(dataset=dataset, versions=[driver.version("ops")]))
    assert m.Session.objects.filter(key__startswith="eval-").count() == 1
    staff = get_user_model().objects.create_user("eve", password="pw", is_staff=True, is_superuser=True)
    client.force_login(staff)

    every = [s.pk for s in m.Session.objects.all()]
    for _ in range(2):
        reply = client.post("/admin/sessions_app/session/", {"action": "make_eval_cases", "_selected_action": every})
        assert reply.status_code == 302
    made = Example.objects.exclude(dataset=dataset)
    assert [(e.input, e.source) for e in made] == [("hello there", f"ops/chat-1#g{session.generation}")]
    page = client.get(reply["Location"]).content.decode()
    assert "0 cases added" in page and "1 messages were cases already" in page
    assert "1 sessions of eval runs skipped" in page
