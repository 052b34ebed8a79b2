"""Datasets in and out: JSONL files (one case a line), sessions made into cases, runs exported.

A line: ``{"input": "order 2 mugs", "name"?: "...", "attachments"?: ["receipt.png"], "expect"?: {...}}``
(attachments: files beside the JSONL file).
(``expect``: ``scorers.py``). A file is loaded into the ``Dataset`` named by its stem (its cases
replaced), so a dataset kept in the repository is the one the admin shows after a run.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction

from agents_app.attachments import clean_name
from agents_app.models import Attachment
from agents_app.runtime.errors import JuneError
from june_evals.driver import SOURCE as EVAL_SOURCE
from june_evals.models import Dataset, EvalCase, EvalRun, Example, ExampleFile
from june_evals.scorers import expect_problems
from sessions_app import models as m
from sessions_app.attachment_services import checked_type
from sessions_app.site_errors import BadRequest

#: what one line and one file may hold
MAX_INPUT = 100_000
MAX_CASES = 10_000
KEYS = {"input", "name", "attachments", "expect"}


def parse_line(line: str, number: int) -> dict[str, Any]:
    try:
        case = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"line {number}: not JSON ({exc.msg})") from None
    if not isinstance(case, dict) or not isinstance(case.get("input"), str) or not case["input"].strip():
        raise BadRequest(f"line {number}: a case is an object with a non-empty string 'input'")
    if unknown := set(case) - KEYS:
        raise BadRequest(f"line {number}: unknown keys {sorted(unknown)}")
    if len(case["input"]) > MAX_INPUT:
        raise BadRequest(f"line {number}: input longer than {MAX_INPUT} characters")
    if not isinstance(case.get("expect", {}), dict):
        raise BadRequest(f"line {number}: 'expect' is an object")
    if problems := expect_problems(case.get("expect", {})):
        raise BadRequest(f"line {number}: " + "; ".join(problems))
    attached = case.get("attachments", [])
    if not isinstance(attached, list) or not all(isinstance(a, str) and a for a in attached):
        raise BadRequest(f"line {number}: 'attachments' is a list of files (paths beside the dataset's file)")
    if len(attached) > settings.JUNE_ATTACHMENTS_PER_MESSAGE:
        raise BadRequest(f"line {number}: at most {settings.JUNE_ATTACHMENTS_PER_MESSAGE} attachments per case")
    return case


def read_jsonl(lines: Iterable[str]) -> list[dict[str, Any]]:
    cases = [parse_line(line, n) for n, line in enumerate(lines, 1) if line.strip()]
    if len(cases) > MAX_CASES:
        raise BadRequest(f"a dataset holds at most {MAX_CASES} cases")
    return cases


def _attached(path: Path, cases: list[dict[str, Any]]) -> list[list[tuple[str, bytes]]]:
    """Each case's files, read from beside the dataset's file and checked as uploads are."""
    out = []
    for n, case in enumerate(cases, 1):
        files = []
        for name in case.get("attachments", []):
            try:
                data = (path.parent / name).read_bytes()
            except OSError as exc:
                raise BadRequest(f"case {n}: cannot read attachment {name}: {exc.strerror}") from None
            try:
                checked_type(data)
            except JuneError as exc:
                raise BadRequest(f"case {n}: attachment {name}: {exc}") from None
            files.append((Path(name).name, data))
        out.append(files)
    return out


def example_file(example: Example, name: str, data: bytes) -> ExampleFile:
    """A file attached to ``example`` (a PNG, JPEG, GIF, WebP or PDF within the size limit)."""
    content_type = checked_type(data)
    row = ExampleFile(example=example, name=clean_name(name, content_type), content_type=content_type, size=len(data))
    row.file.save("attachment", ContentFile(data), save=False)
    row.save()
    return row


def dataset_load(*, path: Path, name: str | None = None) -> Dataset:
    """The dataset ``name`` (default: the file's stem), its examples replaced by the file's (with
    their attachments, paths relative to the file)."""
    cases = read_jsonl(path.read_text().splitlines())
    attached = _attached(path, cases)
    with transaction.atomic():
        made, _ = Dataset.objects.get_or_create(name=name or path.stem)
        # the dataset's row locked, as a run's start locks it: a run starting meanwhile (another
        # `june eval` of the same file) is seen committed, and its cases' examples retired, not
        # deleted from under it (a foreign key violation at this commit)
        dataset = Dataset.objects.select_for_update().get(pk=made.pk)
        if dataset.runs.exists():  # runs refer to its examples: kept for them, out of later runs
            dataset.examples.update(retired=True)
        else:
            dataset.examples.all().delete()
        for case, files in zip(cases, attached):
            example = Example.objects.create(
                dataset=dataset,
                name=str(case.get("name") or "")[:200],
                input=case["input"],
                expect=case.get("expect") or {},
            )
            for file_name, data in files:
                example_file(example, file_name, data)
    return dataset


def _opened_turns(session: m.Session) -> list[m.Turn]:
    """The turns the live generation's user messages opened, in their order (a branch's copies of
    the messages before its fork point name the parent branch's turns), then its own turns whose
    message is not written yet (queued)."""
    users = m.Message.objects.filter(session=session, generation=session.generation, role="user")
    ordered = list(dict.fromkeys(t for t in users.order_by("index").values_list("turn_id", flat=True) if t))
    own = m.Turn.objects.filter(session=session, generation=session.generation).order_by("order")
    seen = set(ordered)
    ordered += [t for t in own.values_list("pk", flat=True) if t not in seen]
    turns = m.Turn.objects.in_bulk(ordered)
    return [turns[t] for t in ordered if t in turns]


def examples_from_sessions(*, dataset: Dataset, sessions: Iterable[m.Session], tally: Counter | None = None) -> int:
    """A case per person's message of each session's live generation: "what would the new
    version answer here?" (its answer then, as ``expect.reference``, for a judge to compare).
    Made again, it adds only the messages no case was made of yet (a turn is made a case once,
    whatever the dataset), and never of an eval run's own sessions (their messages are cases
    already). ``tally``: counts what was skipped (``already``, ``eval_sessions``)."""
    tally = Counter() if tally is None else tally
    made = 0
    for session in sessions:
        turns = _opened_turns(session)
        if any(turn.source == EVAL_SOURCE for turn in turns):
            tally["eval_sessions"] += 1
            continue
        taken = set(
            Example.objects.filter(source_turn__in=[t.pk for t in turns], retired=False).values_list(
                "source_turn", flat=True
            )
        )
        for turn in turns:
            text = str((turn.input or {}).get("text") or "")
            if not text.strip() or turn.kind != "inbound":
                continue
            if turn.pk in taken:
                tally["already"] += 1
                continue
            try:
                with transaction.atomic():  # a second click at the same moment: its insert is refused
                    _example_of(dataset, session, turn, text)
            except IntegrityError:
                tally["already"] += 1
                continue
            made += 1
    return made


def _example_of(dataset: Dataset, session: m.Session, turn: m.Turn, text: str) -> Example:
    example = Example.objects.create(
        dataset=dataset,
        name=f"{session.key} #{turn.order}"[:200],
        input=text,
        expect={"reference": turn.text or ""},
        source=f"{session.agent}/{session.key}#g{session.generation}",
        source_turn=turn.pk,
        owner_id=None if session.owner_id is None else str(session.owner_id),
    )
    ids = [a.get("id") for a in (turn.input or {}).get("attachments") or () if isinstance(a, dict)]
    # the message's files, copied (a regenerated message's are the upload its first turn took)
    for row in Attachment.objects.filter(id__in=ids, agent=session.agent, session_key=session.key):
        with row.file.open("rb") as f:
            example_file(example, row.name, f.read())
    return example


def run_rows(run: EvalRun) -> list[dict[str, Any]]:
    """A run's cases as plain rows (the export: JSON Lines or CSV)."""
    rows = []
    for case in EvalCase.objects.filter(run=run).select_related("example").prefetch_related("example__files"):
        rows.append(
            {
                "run": run.pk,
                "example": case.example_id,
                "name": case.example.name,
                "input": case.example.input,
                "attachments": [f.name for f in case.example.files.all()],
                "version": run.versions[case.version]["label"],
                "status": case.status,
                "passed": case.passed,
                "text": case.text,
                "tool_calls": case.tool_calls,
                "input_tokens": (case.usage or {}).get("input_tokens"),
                "output_tokens": (case.usage or {}).get("output_tokens"),
                "cost": case.cost,
                "latency": case.latency,
                "scores": case.scores,
            }
        )
    return rows


def user_cases_erase(user_pk: Any, counts: Counter) -> None:
    """``sessions_app.privacy``'s eraser: the cases made from the user's sessions go, with the
    scored cases of runs that used them (they hold the answers to the user's words)."""
    examples = Example.objects.filter(owner_id=str(user_pk))
    n, _ = EvalCase.objects.filter(example__in=examples).delete()
    counts["eval_run_cases"] += n
    n, _ = examples.delete()
    counts["eval_examples"] += n


def on_example_file_deleted(sender: Any, instance: ExampleFile, **kwargs: Any) -> None:
    """``post_delete`` of ``ExampleFile`` (its case deleted, a user's erasure, the admin): its
    file goes once the deletion commits."""
    name = instance.file.name
    if name:
        transaction.on_commit(lambda: instance.file.storage.delete(name))
