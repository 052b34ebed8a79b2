"""The turns, read-only for staff: each with its journal, its timeline (``admin.timeline``),
its tree of parent and child turns (``tree_admin``), what it spent and cost, its answers and steps."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.contrib import admin
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agents_app.runtime import short_turn_id
from sessions_app import models as m
from sessions_app.admin import console, edits, timeline, tree_admin
from sessions_app.admin.a11y import A11yMedia
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.admin.sessions import USERNAME, StaffReadOnly, archived_name, pretty_json, step_note
from sessions_app.audit import audit_staff_read
from sessions_app.times import ZonedTimes, time_column, time_html


@admin.register(m.Turn)
class TurnAdmin(ZonedTimes, StaffReadOnly, CheckedModelAdmin):
    #: what an operator scans a list for; the rest is on the turn's page (at 1,400 px the list's
    #: right-hand columns were cut off)
    list_display = ("short", "asked", "session_link", "status_words", "phase", "attempts", time_column("created_at"))
    list_display_links = ("short",)
    list_select_related = ("session",)
    list_filter = ("status", "phase", "cancel_reason", "kind", "session__agent", "created_at")
    search_fields = ("=id", "session__key", "session__agent", f"created_by__{USERNAME}")
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
    Media = A11yMedia
    fieldsets = (
        ("Timeline", {"fields": ("times_words", "timeline_table", "phase_words", "lease_words", "usage_cost")}),
        (
            None,
            {
                "fields": (
                    "id",
                    "session_link",
                    "order",
                    "generation",
                    "status",
                    "kind",
                    "source",
                    "created_by",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        (
            "Input and outcome",
            {
                "fields": (
                    "input_json",
                    "text",
                    "cancel_reason",
                    "error_json",
                    "usage_json",
                    "pending_json",
                    "policy_json",
                )
            },
        ),
        (
            "Lease and journal",
            {"fields": ("attempt_id", "attempts", "revision", "lease_owner", "lease_expiry", "phase", "journal_json")},
        ),
        ("Subagents: the tree of turns", {"fields": ("turn_tree",)}),
        ("Steps", {"fields": ("steps_table",)}),
        ("Answers", {"fields": ("answers_table",)}),
    )
    #: every field shown is read-only: a turn changes only through the engine
    readonly_fields = tuple(name for _, options in fieldsets for name in options["fields"])

    @admin.display(description="turn", ordering="id")
    def short(self, obj):
        return format_html('<code title="{}">{}</code>', obj.pk, short_turn_id(obj.pk))

    @admin.display(description="asked")
    def asked(self, obj):
        data = obj.input if isinstance(obj.input, dict) else {}
        text = " ".join(str(data.get("text") or "").split())
        files = len(data.get("attachments") or ())
        if not text:
            return f"({files} attachment{'s' if files != 1 else ''})" if files else f"({obj.kind})"
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="status", ordering="status")
    def status_words(self, obj):
        return f"{obj.status} ({obj.cancel_reason})" if obj.cancel_reason else obj.status

    @admin.display(description="tree")
    def turn_tree(self, obj):
        return tree_admin.tree_html(obj, self.admin_site.name)

    # -- the operator console's reading of the turn (sessions_app/admin/timeline.py) ----------------

    @admin.display(description="steps")
    def timeline_table(self, obj):
        return render_to_string("admin/june/_timeline.html", {"steps": timeline.timeline(obj), "turn": obj})

    @admin.display(description="queued, started, ended")
    def times_words(self, obj):
        return timeline.times_html(obj)

    @admin.display(description="where it is")
    def phase_words(self, obj):
        return timeline.phase_text(obj)

    @admin.display(description="lease")
    def lease_words(self, obj):
        return timeline.lease_text(obj, timezone.now().timestamp())

    @admin.display(description="tokens and cost")
    def usage_cost(self, obj):
        model = console.agent_model(obj.session.agent)
        cost = console.cost_of(obj.usage, model)
        usage = obj.usage or {}
        tokens = (
            ", ".join(
                f"{k.removesuffix('_tokens').replace('_', ' ')} {v}" for k, v in usage.items() if isinstance(v, int)
            )
            or "none"
        )
        text = f"{tokens} — {model}: " + ("no price configured" if cost is None else f"${cost:.4f}")
        if usage.get("limited"):
            text += f" · reached its limit of {usage['limited'].replace('_', ' ')}"
        children = usage.get("children")
        if isinstance(children, dict):
            text += " · its subagents: " + ", ".join(
                f"{k.removesuffix('_tokens').replace('_', ' ')} {v}" for k, v in children.items()
            )
        return text

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("session", "created_by")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        turn = self.get_object(request, object_id)
        if turn is not None and self.has_view_permission(request, turn):
            audit_staff_read(
                request=request,
                action=m.AuditAction.TURN_READ,
                session=turn.session,
                generation=turn.generation,
                turn_id=turn.pk,
            )
        return super().change_view(request, object_id, form_url, extra_context=extra_context)

    @admin.display(description="session", ordering="session__key")
    def session_link(self, obj):
        s = obj.session
        url = reverse(
            "admin:sessions_app_session_generation", args=[s.pk, obj.generation], current_app=self.admin_site.name
        )
        return format_html('<a href="{}">{}/{}</a>', url, s.agent, archived_name(s, obj.generation))

    @admin.display(description="lease expiry")
    def lease_expiry(self, obj):
        if obj.lease_expires_at is None:
            return "-"
        when = dt.datetime.fromtimestamp(obj.lease_expires_at, tz=dt.UTC)
        if (obj.lease_owner or "").startswith(timeline.TAKEN) and obj.status in (
            m.TurnStatus.QUEUED,
            m.TurnStatus.RUNNING,
        ):
            state = "a runner took it and claims it next; another may take it from then"  # a take's mark, no lease
        elif obj.status != m.TurnStatus.RUNNING:
            state = "last lease; the turn is not running"
        else:
            state = "expired" if when < timezone.now() else "held"
        return f"{timezone.localtime(when):%Y-%m-%d %H:%M:%S %Z} ({state})"

    def _json(self, value: Any):
        return format_html("<pre>{}</pre>", pretty_json(value)) if value not in (None, {}, "") else "-"

    @admin.display(description="input")
    def input_json(self, obj):
        return self._json(obj.input)

    @admin.display(description="error")
    def error_json(self, obj):
        return self._json(obj.error)

    @admin.display(description="usage")
    def usage_json(self, obj):
        return self._json(obj.usage)

    @admin.display(description="pending request")
    def pending_json(self, obj):
        return self._json(obj.pending)

    @admin.display(description="policy")
    def policy_json(self, obj):
        return self._json(obj.policy)

    @admin.display(description="journal")
    def journal_json(self, obj):
        return self._json(obj.journal)

    @admin.display(description="answers to its parked requests")
    def answers_table(self, obj):
        rows = list(obj.answers.select_related("user").order_by("created_at")[:100])
        if not rows:
            return "-"
        proposed = edits.proposed_inputs(obj)  # a tool approval's edit: before and after
        body = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            '<td class="june-edit">{}</td></tr>',
            (
                (
                    a.input_id,
                    json.dumps(a.answer),
                    a.user.get_username() if a.user else (a.by or "-"),
                    a.via,
                    a.remote_addr or "-",
                    time_html(a.created_at),
                    edits.edit_note(a, proposed),
                )
                for a in rows
            ),
        )
        return format_html(
            "<table><tr><th>input</th><th>answer</th><th>by</th><th>via</th><th>from</th>"
            "<th>at</th><th>tool approval</th></tr>{}</table>",
            body,
        )

    @admin.display(description="steps (first 200)")
    def steps_table(self, obj):
        rows = list(obj.steps.order_by("id").values_list("key", "message_index", "created_at", "data")[:200])
        # and the steps folded into the messages the turn wrote (``Message.step``)
        rows += [
            (key, idx, when, None)
            for key, idx, when in obj.written()
            .filter(step__isnull=False)
            .order_by("index")
            .values_list("step", "index", "created_at")[: 200 - len(rows)]
        ]
        rows.sort(key=lambda row: row[2])
        if not rows:
            return "-"
        body = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    key,
                    "" if idx is None else idx,
                    step_note(key, data),
                    time_html(when),
                )
                for key, idx, when, data in rows
            ),
        )
        return format_html("<table><tr><th>step</th><th>message</th><th>what</th><th>at</th></tr>{}</table>", body)
