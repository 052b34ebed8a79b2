"""Datasets (cases edited inline), runs (started from a dataset, shown side by side: each case's
pass/fail, answer, answer diff, tokens, cost and latency per version, with the totals; exported
as JSON Lines or CSV), and "Make eval cases" on the sessions' list.

Staff only, as every page of June's admin: a case made from a session holds a user's words."""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
from collections import Counter
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.exceptions import NotRegistered
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from agents_app.attachments import clean_name
from agents_app.runtime.errors import JuneError
from june_evals import driver, evaltasks
from june_evals.agent_versions import describe
from june_evals.datasets import examples_from_sessions, run_rows
from june_evals.models import AgentVersion, Dataset, EvalCase, EvalRun, Example, ExampleFile
from sessions_app import health, wiring
from sessions_app import models as m
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.attachment_services import checked_type
from sessions_app.times import time_column


class StaffOnly:
    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser


class ExampleInline(StaffOnly, admin.StackedInline):
    model = Example
    extra = 1
    fields = ("name", "input", "expect", "attached", "source", "retired")
    readonly_fields = ("attached", "source")
    show_change_link = True  # a case's own page: its attachments

    @admin.display(description="attachments")
    def attached(self, example: Example) -> str:
        names = [f.name for f in example.files.all()] if example.pk else []
        return ", ".join(names) or "none (add files on the case's own page)"


class ExampleFileForm(forms.ModelForm):
    """An upload, checked as a chat's attachment is (type sniffed from the bytes, size)."""

    class Meta:
        model = ExampleFile
        fields = ("file",)

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload and "file" in self.changed_data:
            upload.seek(0)
            data = upload.read(settings.JUNE_ATTACHMENT_MAX_BYTES + 1)
            try:
                self.instance.content_type = checked_type(data)
            except JuneError as exc:
                raise forms.ValidationError(str(exc)) from None
            self.instance.size = len(data)
            self.instance.name = clean_name(upload.name, self.instance.content_type)
            upload.seek(0)
        return upload


class ExampleFileInline(StaffOnly, admin.TabularInline):
    model = ExampleFile
    form = ExampleFileForm
    extra = 1
    fields = ("file", "name", "content_type", "size")
    readonly_fields = ("name", "content_type", "size")


@admin.register(Example)
class ExampleAdmin(StaffOnly, CheckedModelAdmin):
    """A case on its own page: its text, expectations and attached files (PNG, JPEG, GIF, WebP,
    PDF), sent with its turn as a person's message's are."""

    list_display = ("__str__", "dataset", "retired")
    list_filter = ("dataset",)
    search_fields = ("name", "input")
    fields = ("dataset", "name", "input", "expect", "source", "retired")
    readonly_fields = ("source",)
    inlines = [ExampleFileInline]


MODEL_HELP = "empty: the agent's own; cassette:FILE, script:FILE or script:module:function (docs/evals.md)"


class RunForm(forms.Form):
    agent = forms.ChoiceField(label="Agent (A)")
    instructions = forms.CharField(
        label="A's instructions", required=False, widget=forms.Textarea(attrs={"rows": 4}), max_length=100_000
    )
    against = forms.ChoiceField(label="Against agent (B)", required=False)
    against_instructions = forms.CharField(
        label="B's instructions", required=False, widget=forms.Textarea(attrs={"rows": 4}), max_length=100_000
    )
    against_git = forms.CharField(
        label="B at git revision", required=False, max_length=200, help_text="B's agent folder at a revision (HEAD~1)"
    )
    model = forms.CharField(label="A's model", required=False, max_length=1000, help_text=MODEL_HELP)
    against_model = forms.CharField(label="B's model", required=False, max_length=1000, help_text=MODEL_HELP)
    concurrency = forms.IntegerField(min_value=1, max_value=64, initial=8)
    judge = forms.BooleanField(
        label="Judge",
        required=False,
        help_text="the cases' judge expectations ask the agent's own model (its tokens are spent); "
        'unticked, they fail with "no judge to ask"',
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(wiring.agents())
        self.fields["agent"].choices = [(n, n) for n in names]
        self.fields["against"].choices = [("", "(none)"), *[(n, n) for n in names]]


@admin.register(Dataset)
class DatasetAdmin(StaffOnly, CheckedModelAdmin):
    list_display = ("name", "description", time_column("created_at"))
    search_fields = ("name",)
    inlines = [ExampleInline]
    change_form_template = "admin/june_evals/dataset_change_form.html"

    def get_urls(self):
        own = [path("<int:pk>/run/", self.admin_site.admin_view(self.run_view), name="june_evals_dataset_run")]
        return own + super().get_urls()

    def run_view(self, request, pk: int):
        if not self.has_change_permission(request):
            return HttpResponse(status=403)
        dataset = get_object_or_404(Dataset, pk=pk)
        form = RunForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                versions = [
                    driver.version(
                        data["agent"],
                        instructions=data["instructions"] or None,
                        label="A",
                        model=data["model"] or None,
                        web=True,
                        judge=data["judge"],
                    )
                ]
                if any(data[k] for k in ("against", "against_instructions", "against_git", "against_model")):
                    versions.append(
                        driver.version(
                            data["against"] or data["agent"],
                            instructions=data["against_instructions"] or None,
                            label="B",
                            git=data["against_git"] or None,
                            model=data["against_model"] or None,
                            web=True,
                            judge=data["judge"],
                        )
                    )
                run, made = driver.run_start_once(dataset=dataset, versions=versions, concurrency=data["concurrency"])
            except JuneError as exc:
                form.add_error(None, str(exc))
            else:
                if made:
                    evaltasks.schedule(run)
                else:  # a double click, or the same form sent from another tab
                    messages.info(request, f"{run} with these settings started moments ago: this is it.")
                return redirect(reverse("admin:june_evals_evalrun_change", args=[run.pk]))
        cases = dataset.examples.filter(retired=False).count()  # a reloaded file's old cases are kept, not run
        context = {
            **self.admin_site.each_context(request),
            "title": f"Run {dataset}",
            "form": form,
            "dataset": dataset,
            "cases": cases,
        }
        return TemplateResponse(request, "admin/june_evals/run_start.html", context)


def diff_segments(a: str, b: str) -> list[dict[str, str]]:
    """A word diff of two answers, as segments the template escapes: ``same``, ``del``, ``ins``."""
    old, new = a.split(" "), b.split(" ")
    out: list[dict[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            out.append({"kind": "same", "text": " ".join(old[i1:i2])})
        if op in ("delete", "replace"):
            out.append({"kind": "del", "text": " ".join(old[i1:i2])})
        if op in ("insert", "replace"):
            out.append({"kind": "ins", "text": " ".join(new[j1:j2])})
    return out


#: what a spreadsheet takes for a formula at a cell's start (OWASP's "CSV injection")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A text cell of the CSV export, made inert for a spreadsheet: a person's words or a model's
    answer that starts like a formula (``=HYPERLINK(…)``) gets a leading ``'`` (the JSON Lines
    export keeps every value as it is)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def compare_rows(run: EvalRun) -> list[dict[str, Any]]:
    by_example: dict[int, dict[str, Any]] = {}
    for case in EvalCase.objects.filter(run=run).select_related("example"):
        row = by_example.setdefault(case.example_id, {"example": case.example, "cells": [None] * len(run.versions)})
        row["cells"][case.version] = case
    rows = list(by_example.values())
    for row in rows:
        a, b = (row["cells"] + [None])[:2]
        row["diff"] = (
            diff_segments(a.text, b.text) if a and b and a.scored_at and b.scored_at and a.text != b.text else []
        )
        row["changed"] = bool(a and b and a.passed != b.passed)
    return rows


@admin.register(EvalRun)
class EvalRunAdmin(StaffOnly, CheckedModelAdmin):
    list_display = ("__str__", "labels", "status", time_column("created_at"), time_column("finished_at"))
    list_filter = ("status",)
    change_form_template = "admin/june_evals/run_compare.html"

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # a run starts from its dataset's page

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="versions")
    def labels(self, run: EvalRun) -> str:
        return " vs ".join(
            f"{v['label']}: {v.get('about') or v['agent']}" + (" (own instructions)" if v.get("instructions") else "")
            for v in run.versions
        )

    def get_urls(self):
        own = [path("<int:pk>/export/", self.admin_site.admin_view(self.export_view), name="june_evals_evalrun_export")]
        return own + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        if not re.fullmatch(r"[0-9]{1,18}", str(object_id)):  # /evalrun/abc/change/: a 404, not a 500
            raise Http404("no such eval run")
        run = get_object_or_404(EvalRun, pk=object_id)
        if run.status == "running" and "step" in request.GET:
            driver.run_step(run=run, judging=False)  # a look also moves a run whose ticks were lost (no judge here)
            run.refresh_from_db()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": str(run),
            "run": run,
            "labels": self.labels(run),
            "rows": compare_rows(run),
            "totals": driver.totals(run),
            "now": timezone.now(),
            "no_worker": run.status == "running" and not health.workers_alive(),
        }
        return TemplateResponse(request, self.change_form_template, context)

    def export_view(self, request, pk: int):
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        run = get_object_or_404(EvalRun, pk=pk)
        rows = run_rows(run)
        if request.GET.get("format") == "csv":
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["run"])
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {k: csv_cell(json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in row.items()}
                )
            response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="eval-run-{run.pk}.csv"'
            return response
        body = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
        response = HttpResponse(body, content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="eval-run-{run.pk}.jsonl"'
        return response


@admin.register(AgentVersion)
class AgentVersionAdmin(StaffOnly, CheckedModelAdmin):
    """The agent versions runs have made (a git revision's folder, a cassette, a script): read
    only — a run makes them, and a version's turns keep naming it."""

    list_display = ("name", "about", "created_at")
    search_fields = ("name", "agent", "sha")
    fields = ("name", "agent", "rev", "sha", "folder", "model_kind", "created_at")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="version")
    def about(self, row: AgentVersion) -> str:
        return describe(row)

    @admin.display(description="model")
    def model_kind(self, row: AgentVersion) -> str:
        return describe(row).partition(", model ")[2] or "the agent's own"


@admin.action(description="Make eval cases of the selected sessions", permissions=["view"])  # staff's too
def make_eval_cases(model_admin, request, queryset):
    """Each person's message of the chosen sessions becomes a case of the dataset
    "sessions <date>", with the answer given then kept as its ``reference``."""
    if not (request.user.is_active and request.user.is_staff):
        return None
    dataset, _ = Dataset.objects.get_or_create(name=f"sessions {timezone.now():%Y-%m-%d}")
    tally: Counter = Counter()
    made = examples_from_sessions(dataset=dataset, sessions=queryset, tally=tally)
    url = reverse("admin:june_evals_dataset_change", args=[dataset.pk])
    said = [f"{made} cases added to {dataset.name}."]
    if tally["already"]:
        said.append(f"{tally['already']} messages were cases already (a message is made a case once).")
    if tally["eval_sessions"]:
        said.append(f"{tally['eval_sessions']} sessions of eval runs skipped (their messages are cases already).")
    model_admin.message_user(request, " ".join(said), messages.SUCCESS)
    return redirect(url)


def _add_session_action() -> None:
    """The sessions' list gets the action (sessions_app's admin knows nothing of the evals)."""
    try:
        session_admin = admin.site.get_model_admin(m.Session)
    except NotRegistered:  # a site that shows June's models elsewhere
        return
    session_admin.actions = (*(session_admin.actions or ()), make_eval_cases)


_add_session_action()
