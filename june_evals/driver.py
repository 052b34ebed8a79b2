"""An eval run, driven: its cases started as real turns (the site's services: admission, quotas,
the workers), and each scored once its turn has settled.

``run_step`` is the whole of it, and may be called by any number of processes at once (the
command line's loop, the workers' ``evaltasks.eval_tick``, an admin page): a case is started by
the conditional UPDATE that sets its ``turn_id``, in the transaction that creates its turn, and
scored by the conditional UPDATE that sets its ``scored_at`` — a case whose turn a killed worker
left is taken up by the sweeper as any turn is, and a score two processes compute is written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents_app.runtime.errors import JuneError
from agents_app.runtime.ids import new_turn_id
from agents_app.runtime.records import SETTLED_STATUSES
from june_evals import agent_versions as agent_versions
from june_evals.judge import judge_for as judge_of_agent
from june_evals.models import Dataset, EvalCase, EvalRun
from june_evals.models.evalrows import RunStatus
from june_evals.scorers import Score, score
from sessions_app import attachment_services as attach
from sessions_app import listings, pricing, services, wiring
from sessions_app import models as m
from sessions_app.site_errors import BadRequest, RateLimited

#: the turns' source (their policy: the agent's default surface; their requests wait for no
#: person: never in the approval inbox, ``listings.EVAL_SOURCE``)
SOURCE = listings.EVAL_SOURCE
SETTLED = {str(s) for s in SETTLED_STATUSES}
Judge = Callable[[str, dict[str, Any]], Score]
#: agent name -> its judge (``judge.judge_for``)
JudgeFor = Callable[[str], Judge]


def version(
    agent: str,
    *,
    instructions: str | None = None,
    label: str | None = None,
    git: str | None = None,
    model: str | None = None,
    web: bool = False,
    judge: bool = False,
) -> dict[str, Any]:
    """One side of a comparison: an agent, maybe with other instructions than its folder's, its
    folder at a git revision (``git``), a model of the run's (``model``: ``cassette:FILE``,
    ``script:FILE``, ``script:module:function``); the last two make an ``AgentVersion`` whose
    name the turns run as (``runs_as``), so the workers run that version. ``web``: asked from the
    admin (``agent_versions.model_spec``). ``judge``: its cases' ``judge`` expectations ask its
    agent's model, whoever scores them (the command line, the workers' ticks, the run's page)."""
    wiring.agent(agent, versions=False)  # NotFound for a name the site does not have
    made = agent_versions.make(agent, git=git, model=model, web=web)
    out: dict[str, Any] = {"label": label or agent, "agent": agent, "instructions": instructions}
    if judge:
        out["judge"] = True
    if made is not None:
        out.update(runs_as=made.name, about=agent_versions.describe(made))
    return out


def runs_as(v: dict[str, Any]) -> str:
    """The agent name a version's turns run as."""
    return str(v.get("runs_as") or v["agent"])


#: seconds within which the admin's "Start the run" with the same settings is the same run
START_ONCE_SECONDS = 60


def run_start(*, dataset: Dataset, versions: list[dict[str, Any]], concurrency: int = 8) -> EvalRun:
    """An EvalRun and one EvalCase per (example, version), none started yet."""
    return run_start_once(dataset=dataset, versions=versions, concurrency=concurrency, within=0)[0]


def run_start_once(
    *, dataset: Dataset, versions: list[dict[str, Any]], concurrency: int = 8, within: float = START_ONCE_SECONDS
) -> tuple[EvalRun, bool]:
    """``run_start``, unless a run of the dataset with the same versions and concurrency started
    less than ``within`` seconds ago and still runs: then that run, and False (not made now). A
    double click, or the same form sent from two tabs, makes one run. The check and the insert
    are one transaction behind the dataset's row lock (on SQLite, the write lock IMMEDIATE takes
    at the transaction's start), so two requests at once cannot both find none."""
    if not 1 <= len(versions) <= 2:
        raise ValueError("an eval run compares one or two versions")
    concurrency = max(1, concurrency)
    with transaction.atomic():
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()  # a reload waits (datasets.py)
        if within > 0:
            recent = EvalRun.objects.filter(
                dataset=dataset,
                status=RunStatus.RUNNING,
                concurrency=concurrency,
                created_at__gte=timezone.now() - timezone.timedelta(seconds=within),
            )
            same = next((run for run in recent.order_by("-id")[:20] if run.versions == versions), None)
            if same is not None:
                return same, False
        examples = list(dataset.examples.filter(retired=False))
        if not examples:  # a run of nothing would "pass" 0 of 0 and say nothing of why
            raise BadRequest(f"the dataset {dataset.name!r} has no cases to run")
        run = EvalRun.objects.create(dataset=dataset, versions=versions, concurrency=concurrency)
        EvalCase.objects.bulk_create(
            EvalCase(run=run, example=example, version=v) for example in examples for v in range(len(versions))
        )
    return run, True


def session_key(case: EvalCase) -> str:
    return f"eval-{case.run_id}-{case.pk}"


def _start(case: EvalCase, run: EvalRun) -> bool:
    """Start ``case``'s turn; False when the site refuses one more now (rate, quota)."""
    v = run.versions[case.version]
    turn_id = new_turn_id()
    stored: list[str] = []  # the attachments' files, deleted again if their rows roll back
    try:
        with transaction.atomic():
            if not EvalCase.objects.filter(pk=case.pk, turn_id__isnull=True).update(
                turn_id=turn_id, started_at=timezone.now()
            ):
                return True  # another driver took it
            ids = []
            for f in case.example.files.all():  # a copy of each, sent as a person's message's
                with f.file.open("rb") as content:
                    row = attach.attachment_store(
                        agent=runs_as(v), key=session_key(case), data=content.read(), name=f.name
                    )
                stored.append(row.file.name)
                ids.append(row.id)
            services.turn_start(
                agent=runs_as(v),
                key=session_key(case),
                text=case.example.input,
                source=SOURCE,
                turn_id=turn_id,
                instructions=v.get("instructions"),
                attachments=ids,
            )
    except RateLimited:
        _unstore(stored)
        return False
    except JuneError as exc:  # the site refused this case for good (its text, its agent, its files)
        _unstore(stored)
        _write_score(case, {"status": "refused", "text": str(exc)}, [Score("status", False, str(exc))])
    except BaseException:
        _unstore(stored)
        raise
    return True


def _unstore(names: list[str]) -> None:
    for name in names:
        attach.attachment_file_delete(name)


def tool_calls_of(turn_id: str) -> list[dict[str, Any]]:
    """A turn's tool calls in order, each ``{"id", "name", "input", "result", "is_error"}`` (the
    evals' scorers read them)."""
    rows = list(m.Message.objects.filter(turn_id=turn_id).order_by("generation", "index"))
    results = {
        (row.data or {}).get("call_id"): row.data or {}
        for row in rows
        if row.role == "tool" and isinstance(row.data, dict)
    }
    out = []
    for row in rows:
        if row.role != "assistant" or not isinstance(row.data, dict):
            continue
        for call in row.data.get("tool_calls", ()):
            done = results.get(call.get("id"), {})
            out.append(
                {
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "input": call.get("input") or {},
                    "result": done.get("result"),
                    "is_error": bool(done.get("is_error")),
                }
            )
    return out


def outcome_of(case: EvalCase, turn: m.Turn, agent: str) -> dict[str, Any]:
    usage = dict(turn.usage or {})
    latency = (timezone.now() - case.started_at).total_seconds() if case.started_at else None
    return {
        "input": case.example.input,
        "reference": (case.example.expect or {}).get("reference"),
        "status": turn.status,
        "text": turn.text or "",
        "error": turn.error,
        "tool_calls": tool_calls_of(turn.pk),
        "usage": usage,
        "cost": pricing.cost_of(usage, wiring.agent_model(agent)),
        "latency": latency,
    }


def _withdraw(case: EvalCase, run: EvalRun) -> None:
    """A parked case, scored: its request must not wait in the operators' inbox (where an Approve
    would run a test case's tool) nor be notified. A reset of the case's own session ends it."""
    try:
        services.session_reset(agent=runs_as(run.versions[case.version]), key=session_key(case))
    except JuneError:
        pass  # ended meanwhile (a reset or an answer elsewhere): nothing waits


def _write_score(case: EvalCase, outcome: dict[str, Any], scores: list[Score]) -> bool:
    """Exactly once: only the first writer of a case's score writes it."""
    return bool(
        EvalCase.objects.filter(pk=case.pk, scored_at__isnull=True).update(
            status=str(outcome.get("status") or ""),
            text=str(outcome.get("text") or ""),
            tool_calls=outcome.get("tool_calls") or [],
            usage=outcome.get("usage") or {},
            cost=outcome.get("cost"),
            latency=outcome.get("latency"),
            passed=all(s.passed for s in scores),
            scores=[s.to_json() for s in scores],
            scored_at=timezone.now(),
        )
    )


def run_step(*, run: EvalRun, judge_for: JudgeFor | None = None, judging: bool = True) -> bool:
    """Score the cases whose turns settled (a parked one as it stands: an eval has nobody to
    answer it), start cases up to the run's concurrency; True when every case is scored (the
    run is then marked done). ``judge_for``: the judge of a version's agent. ``judging=False``
    (a web request: a judge is a model call, seconds long) leaves a case its judge must score
    to the next step that judges."""
    judges: dict[str, Judge] = {}
    open_cases = list(EvalCase.objects.filter(run=run, scored_at__isnull=True).select_related("example").order_by("pk"))
    started = [c for c in open_cases if c.turn_id]
    turns = {t.pk: t for t in m.Turn.objects.filter(pk__in=[c.turn_id for c in started])}
    in_flight = 0
    for case in started:
        turn = turns.get(case.turn_id or "")
        if turn is None or turn.status not in SETTLED or (turn.status == "suspended" and turn.waiting):
            in_flight += 1
            continue
        agent = run.versions[case.version]["agent"]
        outcome = outcome_of(case, turn, agent)
        expect = case.example.expect or {}
        judge = None
        asks = judge_for or (judge_of_agent if run.versions[case.version].get("judge") else None)
        if "judge" in expect and asks is not None:
            if not judging:
                continue
            judge = judges.get(agent) or judges.setdefault(agent, asks(agent))
        if _write_score(case, outcome, score(expect, outcome, judge=judge)) and turn.status == "suspended":
            _withdraw(case, run)
    for case in (c for c in open_cases if not c.turn_id):
        if in_flight >= run.concurrency:
            break
        if not _start(case, run):
            break  # refused for now (a rate or a quota): the next step tries again
        in_flight += 1
    if EvalCase.objects.filter(run=run, scored_at__isnull=True).exists():
        return False
    EvalRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
        status=RunStatus.DONE, finished_at=timezone.now()
    )
    return True


def drive(run: EvalRun, *, timeout: float, poll: float = 0.2, judge_for: JudgeFor | None = None) -> bool:
    """``run_step`` until the run is done (True) or ``timeout`` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not run_step(run=run, judge_for=judge_for):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)  # the workers run the turns; this loop only looks again
    return True


def totals(run: EvalRun) -> list[dict[str, Any]]:
    """Per version: cases, scored, passed, the pass rate, tokens, cost and mean latency."""
    out = []
    for i, v in enumerate(run.versions):
        cases = list(EvalCase.objects.filter(run=run, version=i))
        scored = [c for c in cases if c.scored_at]
        passed = sum(1 for c in scored if c.passed)
        costs = [c.cost for c in scored if c.cost is not None]
        latencies = [c.latency for c in scored if c.latency is not None]
        out.append(
            {
                "label": v["label"],
                "cases": len(cases),
                "scored": len(scored),
                "passed": passed,
                "pass_rate": passed / len(cases) if cases else 0.0,
                "input_tokens": sum(int((c.usage or {}).get("input_tokens") or 0) for c in scored),
                "output_tokens": sum(int((c.usage or {}).get("output_tokens") or 0) for c in scored),
                "cost": sum(costs) if costs else None,
                "latency": sum(latencies) / len(latencies) if latencies else None,
            }
        )
    return out
