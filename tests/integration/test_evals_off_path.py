"""The evals off the documented path, as an agent author new to June walks it: a misspelt or
malformed expectation (in a file, in the admin, or stored before it was checked), a dataset of no
cases, a run's page at an address that is no run. Each is a clear refusal or a failed case that
says why, never a traceback, a 500, or a run that never finishes."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from june_evals import driver
from june_evals.models import Dataset, EvalCase, EvalRun, Example
from tests.integration.test_evals import drive_here

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff_client(client):
    client.force_login(get_user_model().objects.create_user("stella", password="pw", is_staff=True))
    return client


def test_a_misspelt_expectation_is_refused_where_it_is_typed(staff_client):
    dataset = Dataset.objects.create(name="typed")
    form = {"dataset": dataset.pk, "name": "t", "input": "hi", "files-TOTAL_FORMS": 0, "files-INITIAL_FORMS": 0}
    page = staff_client.post("/admin/june_evals/example/add/", {**form, "expect": '{"contain": "hi"}'})
    assert page.status_code == 200
    assert "unknown expectation &#x27;contain&#x27; (did you mean &#x27;contains&#x27;?)" in page.content.decode()
    page = staff_client.post("/admin/june_evals/example/add/", {**form, "expect": '["contains"]'})
    assert page.status_code == 200 and "&#x27;expect&#x27; is an object" in page.content.decode()
    assert not Example.objects.exists()
    assert (
        staff_client.post("/admin/june_evals/example/add/", {**form, "expect": '{"contains": "hi"}'}).status_code == 302
    )
    # left empty: no expectation but the default status (it said "'expect' is an object")
    assert staff_client.post("/admin/june_evals/example/add/", {**form, "expect": ""}).status_code == 302
    assert sorted(map(str, Example.objects.values_list("expect", flat=True))) == ["{'contains': 'hi'}", "{}"]


def test_a_malformed_expectation_stored_before_it_was_checked_fails_its_case_and_the_run_ends():
    dataset = Dataset.objects.create(name="stored")
    Example.objects.create(dataset=dataset, input="hello", expect={"tool_calls": "create_order"})
    Example.objects.create(dataset=dataset, input="hello", expect={"equals": "You said: hello"})
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops")])
    drive_here(run)
    bad, good = EvalCase.objects.filter(run=run).order_by("example_id")
    assert (bad.passed, good.passed) == (False, True)
    assert bad.scores == [{"name": "expect", "passed": False, "detail": bad.scores[0]["detail"]}]
    assert bad.scores[0]["detail"].startswith("tool_calls: a list of")
    assert EvalRun.objects.get().status == "done"


def test_a_dataset_of_no_cases_is_refused_in_the_admin_and_on_the_command_line(staff_client, tmp_path):
    empty = Dataset.objects.create(name="empty")
    page = staff_client.post(f"/admin/june_evals/dataset/{empty.pk}/run/", {"agent": "ops", "concurrency": 8})
    assert page.status_code == 200 and "the dataset &#x27;empty&#x27; has no cases to run" in page.content.decode()
    (tmp_path / "nothing.jsonl").write_text("\n")
    with pytest.raises(CommandError, match="the dataset 'nothing' has no cases to run"):
        call_command("june", "eval", str(tmp_path / "nothing.jsonl"), "--agent", "ops", stdout=io.StringIO())
    assert not EvalRun.objects.exists()


def test_a_typo_in_a_dataset_file_names_its_line(tmp_path):
    (tmp_path / "cases.jsonl").write_text(
        '{"input": "hello", "expect": {"equals": "You said: hello"}}\n{"input": "hi", "expect": {"contain": "hi"}}\n'
    )
    with pytest.raises(CommandError, match=r"^line 2: unknown expectation 'contain' \(did you mean 'contains'\?\)$"):
        call_command("june", "eval", str(tmp_path / "cases.jsonl"), "--agent", "ops", stdout=io.StringIO())
    assert not EvalRun.objects.exists()


@pytest.mark.parametrize("address", ["abc", "1x", "²", "99999999999999999999999"])
def test_a_run_page_at_an_address_that_is_no_run_is_a_404(staff_client, address):
    assert staff_client.get(f"/admin/june_evals/evalrun/{address}/change/").status_code == 404


def test_the_csv_export_leaves_no_formula_for_a_spreadsheet(staff_client):
    dataset = Dataset.objects.create(name="formulas")
    Example.objects.create(dataset=dataset, name="@SUM(A1)", input='=HYPERLINK("http://evil.example","x")')
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops")])
    csv_text = staff_client.get(f"/admin/june_evals/evalrun/{run.pk}/export/?format=csv").content.decode()
    assert "'@SUM(A1)" in csv_text and '"\'=HYPERLINK(""http://evil.example"",""x"")"' in csv_text
    jsonl = staff_client.get(f"/admin/june_evals/evalrun/{run.pk}/export/").content.decode()
    assert '"input": "=HYPERLINK(\\"http://evil.example\\",\\"x\\")"' in jsonl  # as it is


def test_a_staff_member_without_model_permissions_sees_and_edits_the_cases(staff_client):
    """Staff only, as every page of June's admin: a staff member given no model permissions (not a
    superuser) saw a dataset's page without its cases, and a case's without its files."""
    dataset = Dataset.objects.create(name="shared")
    example = Example.objects.create(dataset=dataset, input="order 2 mugs", expect={"contains": "mugs"})
    page = staff_client.get(f"/admin/june_evals/dataset/{dataset.pk}/change/").content.decode()
    assert "examples-TOTAL_FORMS" in page and "order 2 mugs" in page
    page = staff_client.get(f"/admin/june_evals/example/{example.pk}/change/").content.decode()
    assert "files-TOTAL_FORMS" in page
    form = {
        "name": "shared",
        "description": "",
        "examples-TOTAL_FORMS": 2,
        "examples-INITIAL_FORMS": 1,
        "examples-0-id": example.pk,
        "examples-0-dataset": dataset.pk,
        "examples-0-input": "order 3 mugs",
        "examples-0-expect": '{"contains": "mugs"}',
        "examples-1-dataset": dataset.pk,
        "examples-1-input": "hello",
        "examples-1-expect": '{"contians": "hello"}',
    }
    page = staff_client.post(f"/admin/june_evals/dataset/{dataset.pk}/change/", form)
    assert page.status_code == 200 and "did you mean &#x27;contains&#x27;?" in page.content.decode()
    form["examples-1-expect"] = '{"contains": "hello"}'
    assert staff_client.post(f"/admin/june_evals/dataset/{dataset.pk}/change/", form).status_code == 302
    assert sorted(Example.objects.values_list("input", flat=True)) == ["hello", "order 3 mugs"]


def test_a_staff_member_who_is_no_superuser_makes_cases_of_sessions_and_nothing_more(staff_client):
    """The issue's "a staff user turns chosen sessions into cases": the sessions' list gave staff
    no actions at all (erasure and holds are a superuser's), so only a superuser could."""
    from sessions_app import models as m
    from sessions_app import services
    from sessions_app.workers import tasks

    user = get_user_model().objects.create_user("ann", password="pw")
    services.turn_start(agent="ops", key="chat-1", text="hello there", user=user)
    session = m.Session.objects.get(key="chat-1")
    tasks.run_turn(m.Turn.objects.get(session=session).pk)

    page = staff_client.get("/admin/sessions_app/session/").content.decode()
    assert "make_eval_cases" in page
    assert not any(a in page for a in ("erase_owners", "hold_sessions", "release_sessions"))
    for refused in ("erase_owners", "hold_sessions"):  # not offered, and not taken when posted
        staff_client.post("/admin/sessions_app/session/", {"action": refused, "_selected_action": [session.pk]})
    session.refresh_from_db()
    assert not session.legal_hold  # still there (refresh_from_db found it), and not held

    made = staff_client.post(
        "/admin/sessions_app/session/", {"action": "make_eval_cases", "_selected_action": [session.pk]}
    )
    assert made.status_code == 302
    [example] = Example.objects.all()
    assert example.input == "hello there" and example.owner_id == str(user.pk)


def test_no_worker_running_is_said_on_the_command_line_and_the_runs_page(staff_client, tmp_path):
    """An author who had not started ``june_worker`` waited the whole ``--timeout`` (600 s) in
    silence, and watched the run's page refresh for good."""
    from django.utils import timezone

    from june_evals.evalcli import NO_WORKER
    from sessions_app import models as m

    (tmp_path / "hello.jsonl").write_text('{"input": "hello"}\n')

    def june_eval() -> str:
        err = io.StringIO()
        with pytest.raises(SystemExit) as exited:
            call_command(
                "june",
                "eval",
                str(tmp_path / "hello.jsonl"),
                "--agent",
                "ops",
                "--timeout",
                "0.3",
                stdout=io.StringIO(),
                stderr=err,
            )
        assert exited.value.code == 2  # nothing ran the turn: not every case settled
        return err.getvalue()

    assert NO_WORKER in june_eval()
    run = EvalRun.objects.get()
    assert (
        'id="june-eval-no-worker"' in staff_client.get(f"/admin/june_evals/evalrun/{run.pk}/change/").content.decode()
    )

    now = timezone.now()
    m.WorkerBeat.objects.create(id="host:1", started_at=now, seen_at=now, slots=8)
    assert NO_WORKER not in june_eval()
    assert (
        'id="june-eval-no-worker"'
        not in staff_client.get(f"/admin/june_evals/evalrun/{run.pk}/change/").content.decode()
    )


def test_the_run_form_counts_the_cases_a_run_would_take(staff_client, tmp_path):
    from june_evals.datasets import dataset_load

    (tmp_path / "reloaded.jsonl").write_text('{"input": "a"}\n{"input": "b"}\n{"input": "c"}\n')
    dataset = dataset_load(path=tmp_path / "reloaded.jsonl")
    driver.run_start(dataset=dataset, versions=[driver.version("ops")])
    (tmp_path / "reloaded.jsonl").write_text('{"input": "a"}\n')
    dataset_load(path=tmp_path / "reloaded.jsonl")  # the first three kept for the run, retired
    page = staff_client.get(f"/admin/june_evals/dataset/{dataset.pk}/run/").content.decode()
    assert "1 case of <strong>reloaded</strong>" in page  # it said 4


@pytest.mark.parametrize("ticked, said", [(True, "You said: Input:"), (False, "no judge to ask")])
def test_a_run_started_in_the_admin_can_ask_the_judge(staff_client, ticked, said):
    """The command line's ``--judge`` had no counterpart in the admin: the workers' ticks and the
    run's page score without a judge, so every ``judge`` case of a run started there failed."""
    dataset = Dataset.objects.create(name="judged")
    Example.objects.create(dataset=dataset, input="hello", expect={"judge": {"prompt": "Is it polite?"}})
    form = {"agent": "ops", "concurrency": 2, **({"judge": "on"} if ticked else {})}
    assert staff_client.post(f"/admin/june_evals/dataset/{dataset.pk}/run/", form).status_code == 302
    run = EvalRun.objects.get()
    drive_here(run)  # run_step as the workers' tick calls it: no judge of its own
    [case] = EvalCase.objects.filter(run=run)
    [verdict] = [s for s in case.scores if s["name"] == "judge"]
    assert verdict["detail"].startswith(said)  # the demo model echoes rather than judging


def test_a_file_reloaded_while_a_run_of_it_starts_retires_the_runs_cases(tmp_path):
    """Two ``june eval`` of one file at once (two CI jobs): the second's load deleted the examples
    the first's run was inserting cases for — a foreign key violation at its commit on
    PostgreSQL. The dataset's row is locked by both: the load waits, sees the run, retires."""
    import threading
    import time

    from django.db import connection, transaction

    from june_evals.datasets import dataset_load

    (tmp_path / "twice.jsonl").write_text('{"input": "hello"}\n')
    dataset = dataset_load(path=tmp_path / "twice.jsonl")
    started, loading = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_run() -> None:
        try:
            with transaction.atomic():  # the run's transaction stays open while the reload begins
                driver.run_start(dataset=dataset, versions=[driver.version("ops")])
                started.set()
                loading.wait(10)
                time.sleep(0.5)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def reload() -> None:
        try:
            started.wait(10)
            loading.set()
            dataset_load(path=tmp_path / "twice.jsonl")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=first_run), threading.Thread(target=reload)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    run = EvalRun.objects.get()
    assert Example.objects.filter(dataset=dataset, retired=True).count() == 1  # the run's, kept
    assert EvalCase.objects.filter(run=run, example__retired=True).count() == 1
    assert Example.objects.filter(dataset=dataset, retired=False).count() == 1  # the reload's


def test_the_runs_page_leaves_a_judged_case_to_the_workers(staff_client):
    """A look at a running run moves it (``?step``), in the web process: a judge there would be a
    model call of seconds inside a request, so a judged case is left for the next tick."""
    from sessions_app import models as mm
    from sessions_app.workers import tasks

    dataset = Dataset.objects.create(name="judged on the page")
    Example.objects.create(dataset=dataset, input="hello", expect={"judge": {"prompt": "Is it polite?"}})
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops", judge=True)])
    driver.run_step(run=run, judging=False)  # starts it
    [case] = EvalCase.objects.filter(run=run)
    tasks.run_turn(case.turn_id)
    assert mm.Turn.objects.get(pk=case.turn_id).status == "completed"
    staff_client.get(f"/admin/june_evals/evalrun/{run.pk}/change/?step=1")
    case.refresh_from_db()
    assert case.scored_at is None  # settled, but its judge is not asked in a request
    drive_here(run)  # a worker's tick judges it
    case.refresh_from_db()
    assert [s["detail"][:15] for s in case.scores if s["name"] == "judge"] == ["You said: Input"]


def test_the_command_prints_no_line_of_the_queue_s_own(tmp_path):
    """In a host whose logging names no handler (a ``startproject`` site's), django-q2 gives its
    logger one of its own at INFO: ``june eval`` printed ``12:00:01 [Q] INFO Enqueued [default] 7``
    between its lines, once per case. The command hears the queue's warnings only (``-v 2``: all)."""
    import logging

    from django_q.conf import logger

    (tmp_path / "two.jsonl").write_text('{"input": "hello"}\n{"input": "hi"}\n')
    heard: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: heard.append(record.getMessage())  # type: ignore[method-assign]
    level, logger.level = logger.level, logging.INFO  # as django-q2 sets it up in such a host
    logger.addHandler(handler)
    try:
        for verbosity in (1, 2):
            with pytest.raises(SystemExit):
                call_command(
                    "june", "eval", str(tmp_path / "two.jsonl"), "--agent", "ops", "--timeout", "0.2",
                    verbosity=verbosity, stdout=io.StringIO(), stderr=io.StringIO(),
                )  # fmt: skip
            assert logger.level == logging.INFO  # as it was
            # (its turns are queued by their rows, no task of django-q2's: -v 2 has none to show)
            assert [line for line in heard if line.startswith("Enqueued")] == [], heard
    finally:
        logger.removeHandler(handler)
        logger.level = level


def test_a_run_started_twice_at_once_in_the_admin_is_one_run(tmp_path):
    """A double click on "Start the run", or the same form sent from two tabs, made two runs (each
    case's turn twice: twice the tokens). Two requests at once, on two connections: one run, and
    both land on its page; the same form a minute later is a new run."""
    import threading

    from django.db import connection
    from django.test import Client

    dataset = Dataset.objects.create(name="twice")
    Example.objects.create(dataset=dataset, input="hello")
    staff = get_user_model().objects.create_user("tab", password="pw", is_staff=True)
    form = {"agent": "ops", "concurrency": 2}
    url = f"/admin/june_evals/dataset/{dataset.pk}/run/"
    clients = [Client(), Client()]
    for c in clients:
        c.force_login(staff)
    ready, answers = threading.Barrier(2), []

    def click(c: Client) -> None:
        try:
            ready.wait()
            answers.append(c.post(url, form))
        finally:
            connection.close()

    threads = [threading.Thread(target=click, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    run = EvalRun.objects.get()
    assert [a.status_code for a in answers] == [302, 302]
    assert {a["Location"] for a in answers} == {f"/admin/june_evals/evalrun/{run.pk}/change/"}
    assert EvalCase.objects.filter(run=run).count() == 1
    said = (
        clients[0].get(answers[0]["Location"]).content.decode()
        + clients[1].get(answers[1]["Location"]).content.decode()
    )
    assert "with these settings started moments ago" in said

    EvalRun.objects.filter(pk=run.pk).update(created_at=run.created_at - timezone.timedelta(minutes=2))
    assert clients[0].post(url, form).status_code == 302
    assert EvalRun.objects.count() == 2  # a minute later: a run of its own
