"""Datasets (``Dataset``, ``Example``) and runs (``EvalRun``, ``EvalCase``)."""

from __future__ import annotations

import uuid

from django.core.exceptions import ValidationError
from django.db import models

from june_evals.scorers import expect_problems


class Dataset(models.Model):
    """Named cases for an agent: imported from JSONL, typed in the admin, or made from sessions."""

    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Example(models.Model):
    """One case: the input text, its attached files (``files``: ``ExampleFile``), and what a
    passing answer looks like (``expect``: the scorers' keys, docs/evals.md)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="examples")
    name = models.CharField(max_length=200, blank=True, default="")
    input = models.TextField()
    expect = models.JSONField(default=dict, blank=True)
    #: the session it was made from ("agent/key#generation"), when staff made it from one
    source = models.CharField(max_length=300, blank=True, default="")
    #: the text of the pk of the user whose session it was made from (an integer, a UUID or a
    #: string key alike): their erasure deletes it
    owner_id = models.CharField(max_length=200, null=True, blank=True, db_index=True)
    #: replaced by a reload of its dataset: kept for the runs that used it, left out of new ones
    retired = models.BooleanField(default=False)
    #: the turn whose message it was made from: a turn is made a case once (in any dataset)
    source_turn = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["source_turn"],
                condition=~models.Q(source_turn="") & models.Q(retired=False),
                name="example_once_per_turn",
            )
        ]

    def __str__(self) -> str:
        return self.name or self.input[:60]

    def clean(self) -> None:
        """An expectation the scorers do not know (a misspelt key would pass every answer) or
        cannot read is refused where it is typed (the admin's forms). Left empty: no
        expectation but the default status."""
        if self.expect is None:
            self.expect = {}
        if problems := expect_problems(self.expect):
            raise ValidationError({"expect": problems})


def _example_file_path(instance: ExampleFile, filename: str) -> str:
    return f"june-evals/{uuid.uuid4().hex}"


class ExampleFile(models.Model):
    """A file attached to a case, as a person attaches one to a message: each run of the case
    sends a copy of it with the case's turn (``driver``). A PNG, JPEG, GIF, WebP or PDF within
    the site's attachment size (checked when it is stored: ``datasets.example_file``)."""

    example = models.ForeignKey(Example, on_delete=models.CASCADE, related_name="files")
    file = models.FileField(upload_to=_example_file_path, max_length=200)
    name = models.CharField(max_length=200, blank=True, default="")
    content_type = models.CharField(max_length=100, blank=True, default="")
    size = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name or self.file.name


class RunStatus(models.TextChoices):
    RUNNING = "running"
    DONE = "done"


class EvalRun(models.Model):
    """A dataset through one or two versions of an agent (``versions``: ``[{"label", "agent",
    "instructions"}]``, A first). ``concurrency``: how many of its turns may be in flight."""

    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="runs")
    versions = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=8)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"eval run {self.pk} of {self.dataset}"


class EvalCase(models.Model):
    """One example through one version: its turn, what it answered, its scores. ``turn_id`` is
    set once (a conditional UPDATE claims the case); ``scored_at`` once (the score that wrote it
    is the one kept: a case is scored exactly once whoever scores it)."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="cases")
    example = models.ForeignKey(Example, on_delete=models.PROTECT, related_name="+")
    version = models.PositiveSmallIntegerField(default=0)
    turn_id = models.CharField(max_length=32, null=True, blank=True, unique=True)
    started_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, blank=True, default="")
    text = models.TextField(blank=True, default="")
    tool_calls = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    cost = models.FloatField(null=True, blank=True)
    latency = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True)
    scores = models.JSONField(default=list, blank=True)
    scored_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["example_id", "version"]
        constraints = [models.UniqueConstraint(fields=["run", "example", "version"], name="evalcase_once")]
        indexes = [models.Index(fields=["run", "scored_at"], name="evalcase_run_scored")]
