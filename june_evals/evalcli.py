"""``manage.py june eval DATASET --agent A [--against B]``: a run for CI.

DATASET is a JSONL file (loaded into the dataset named by its stem) or the name of a dataset
in the database. The cases run as real turns on the site's workers (start ``june_worker``
first); this process starts them, scores each as it settles, prints a line per case and the
totals, and exits 1 when a version's pass rate is under ``--threshold`` (2 on a timeout).
``--instructions FILE`` / ``--against-instructions FILE`` give a version other instructions
than its agent folder's (an agent against itself with new instructions: ``--against`` the same
agent). ``--against git:REV`` is A's agent folder at a git revision (``NAME@git:REV``: another
agent's). ``--model`` / ``--against-model`` (``cassette:FILE``, ``script:FILE``,
``script:module:function``) give a version a recorded or scripted model, on the workers too.
``--judge`` lets ``judge`` expectations ask the agent's model.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agents_app.runtime.errors import JuneError
from june_evals import driver
from june_evals.datasets import dataset_load
from june_evals.judge import judge_for
from june_evals.models import Dataset, EvalCase, EvalRun
from sessions_app import health
from sessions_app import models as m
from sessions_app.management.commands.june import EXTENSIONS

#: said when no worker has beaten lately: the cases' turns run on the workers, not here
NO_WORKER = (
    "no worker is running (none has beaten lately): the cases' turns wait in the queue until one "
    "starts — `python manage.py june_worker` (docs/workers.md)"
)


def _instructions(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read instructions {path}: {exc.strerror}") from None


def against(value: str | None, agent: str) -> tuple[str, str | None]:
    """``--against``: ``(agent, git revision or None)`` — NAME, ``git:REV`` or ``NAME@git:REV``."""
    if not value or "git:" not in value:
        return value or agent, None
    name, _, rev = value.partition("git:")
    if not rev or (name and not name.endswith("@")):
        raise CommandError(f"--against {value}: git:REV or NAME@git:REV")
    return name.removesuffix("@") or agent, rev


def _dataset(name: str) -> Dataset:
    path = Path(name)
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise CommandError(f"no dataset file {name}")
        return dataset_load(path=path)
    found = Dataset.objects.filter(name=name).first()
    if found is None:
        raise CommandError(f"no dataset named {name!r} (nor a file)")
    return found


def _case(case: EvalCase, run: EvalRun) -> dict[str, Any]:
    """A scored case as the command reports it (``--json``: as it is; else ``_line``)."""
    return {
        "version": run.versions[case.version]["label"],
        "name": case.example.name or case.example.input[:50],
        "passed": bool(case.passed),
        "failed": "; ".join(f"{s['name']}: {s['detail']}" for s in case.scores if not s["passed"]),
    }


def _line(case: dict[str, Any]) -> str:
    mark = "pass" if case["passed"] else "FAIL"
    return f"{mark} [{case['version']}] {case['name']}" + (f" — {case['failed']}" if case["failed"] else "")


@contextlib.contextmanager
def queue_quiet(verbosity: int) -> Iterator[None]:
    """django-q2 logs ``Enqueued [june] 7`` at INFO for each task a case's turn queues, on a
    handler of its own at INFO when the host's logging names none (a ``startproject`` site's):
    a line of the queue's between the command's, per case. The command hears only its warnings
    (``-v 2``: everything), and gives the logger its level back when it ends."""
    from django_q.conf import logger

    level = logger.level
    if verbosity < 2:
        logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


class EvalCommand:
    help = "run a dataset through an agent (or two versions) on the workers; exit 1 under --threshold"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("dataset", help="a JSONL file, or the name of a dataset in the admin")
        parser.add_argument("--agent", required=True)
        parser.add_argument("--instructions", help="version A's instructions instead of its folder's (a file)")
        parser.add_argument(
            "--against",
            help="version B: another agent (or the same, with --against-instructions), git:REV (A's agent "
            "folder at a git revision) or NAME@git:REV",
        )
        parser.add_argument("--against-instructions", help="version B's instructions (a file)")
        parser.add_argument("--model", help="A's model: cassette:FILE, script:FILE or script:module:function")
        parser.add_argument("--against-model", help="B's model (as --model)")
        parser.add_argument("--threshold", type=float, default=1.0, help="the pass rate each version needs (0-1)")
        parser.add_argument("--concurrency", type=int, default=8, help="turns in flight at once")
        parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every case")
        parser.add_argument("--judge", action="store_true", help="let judge expectations ask the agent's model")
        parser.add_argument("--json", action="store_true", help="print the totals as one JSON object")

    def handle(self, command: BaseCommand, opts: dict[str, Any]) -> None:
        with queue_quiet(opts.get("verbosity", 1)):
            self.run(command, opts)

    def run(self, command: BaseCommand, opts: dict[str, Any]) -> None:
        if not 0.0 <= opts["threshold"] <= 1.0:
            raise CommandError("--threshold is a pass rate between 0 and 1")
        try:
            versions = [
                driver.version(
                    opts["agent"],
                    instructions=_instructions(opts["instructions"]),
                    label="A",
                    model=opts["model"],
                    judge=opts["judge"],
                )
            ]
            if opts["against"] or opts["against_instructions"] or opts["against_model"]:
                agent, git = against(opts["against"], opts["agent"])
                versions.append(
                    driver.version(
                        agent,
                        instructions=_instructions(opts["against_instructions"]),
                        label="B",
                        git=git,
                        model=opts["against_model"],
                        judge=opts["judge"],
                    )
                )
            run = driver.run_start(
                dataset=_dataset(opts["dataset"]), versions=versions, concurrency=opts["concurrency"]
            )
        except JuneError as exc:
            raise CommandError(str(exc)) from None
        if not health.workers_alive():  # the turns would wait in the queue for the whole --timeout
            command.stderr.write(NO_WORKER)
        done = driver.drive(run, timeout=opts["timeout"], judge_for=judge_for if opts["judge"] else None)
        scored = EvalCase.objects.filter(run=run, scored_at__isnull=False).select_related("example")
        cases = [_case(case, run) for case in scored]
        totals = driver.totals(run)
        if opts["json"]:  # one JSON object on stdout, nothing else (CI pipes it to jq)
            command.stdout.write(json.dumps({"run": run.pk, "done": done, "versions": totals, "cases": cases}))
        else:
            for case in cases:
                command.stdout.write(_line(case))
            for t in totals:
                command.stdout.write(
                    f"[{t['label']}] {t['passed']}/{t['cases']} passed ({t['pass_rate']:.0%}), "
                    f"{t['input_tokens']}+{t['output_tokens']} tokens, run {run.pk}"
                )
        if not done:
            command.stderr.write(f"eval run {run.pk}: not every case settled within {opts['timeout']} s")
            for case in EvalCase.objects.filter(run=run, scored_at__isnull=True).select_related("example"):
                turn = m.Turn.objects.filter(pk=case.turn_id or "").first()
                state = f"turn {case.turn_id} {turn.status}" if turn else "not started"
                command.stderr.write(f"  [{run.versions[case.version]['label']}] {case.example}: {state}")
            raise SystemExit(2)
        if any(t["pass_rate"] < opts["threshold"] for t in totals):
            raise SystemExit(1)


def register() -> None:
    EXTENSIONS["eval"] = EvalCommand()
