"""Sessions, turns (with the journal) and the archive of generations, read-only for staff.

Every active staff member may browse (conversations are support material; nobody may add,
change or delete a row here: the store is the only writer). A session page lists its live
generation and every archived one (who reset it and when); a generation page renders that
generation's transcript as a conversation, its turns, steps and events — each list paginated,
each page a constant number of queries whatever the size of the session.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import Max, OuterRef, Subquery
from django.db.models.fields.json import KT
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from sessions_app import generations, selectors
from sessions_app import models as m
from sessions_app.admin import console, search_admin, takeover_admin, tree_admin
from sessions_app.admin.a11y import A11yMedia
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.admin.privacy_actions import erase_owners, hold_sessions, release_sessions
from sessions_app.audit import audit_staff_read
from sessions_app.times import ZonedTimes, time_column

USERNAME = m.username_field()

#: a JSON value longer than this is cut in the page (the row itself is untouched)
JSON_SHOWN_CHARS = 20_000


def pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > JSON_SHOWN_CHARS:
        text = text[:JSON_SHOWN_CHARS] + f"\n… ({len(text) - JSON_SHOWN_CHARS} more characters)"
    return text


def archived_name(session: m.Session, generation: int) -> str:
    return f"{session.key}#g{generation}"


class StaffReadOnly:
    """Staff may look; nobody may add, change or delete through the admin."""

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


# -- reads for the archive pages (constant query count per page) ---------------------------------


def generation_rows(session: m.Session, page_number: Any) -> Any:
    """A page of the session's generations (the reset archives and the branches), newest first,
    with who reset each, where each branch forked, and counts."""
    page, of = generations.generation_counts(session, page_number)
    page.rows = [
        {
            "generation": g,
            "name": archived_name(session, g),
            "live": g == session.generation,
            "reset": of["resets"].get(g),
            "branch": of["forks"].get(g),
            "messages": of["messages"].get(g, 0),
            "events": of["events"].get(g, 0),
            "turns": of["turns"].get(g, 0),
        }
        for g in page.object_list
    ]
    return page


def message_view(row: m.Message, boundaries: dict[int, list[int]] | None = None) -> dict[str, Any]:
    """One message of the log as the conversation template shows it (escaped by the template).
    ``boundaries``: position -> the summaries whose kept part starts there (compaction)."""
    data = row.data or {}
    result = data.get("result")
    role, text, by = row.role, data.get("text", ""), data.get("by")
    model_read = ""  # a takeover's note: the model's wording, behind the people's
    if role == "trigger" and by == m.NOTE_BY:
        role, model_read, text, by = "takeover", text, m.note_for_people(str(text)), "takeover note"
    elif role == "assistant" and str(by or "").startswith(m.PERSON_PREFIX):
        by = f"{str(by).removeprefix(m.PERSON_PREFIX)} (a person, in a takeover)"
    return {
        "boundary_of": (boundaries or {}).get(row.index, []),
        "summarizes_before": data.get("boundary") if row.role == "summary" else None,
        "index": row.index,
        "role": role,
        "turn_id": row.turn_id,
        "created_at": row.created_at,
        "text": text,
        "model_read": model_read,
        "by": by,
        "tool_calls": [
            {"id": c.get("id"), "name": c.get("name"), "args": pretty_json(c.get("input") or {})}
            for c in data.get("tool_calls", ())
        ],
        "blocks": [b for b in data.get("blocks", ()) if isinstance(b, dict)],
        "call_id": data.get("call_id"),
        "name": data.get("name"),
        "result": pretty_json(result) if row.role == "tool" else None,
        "is_error": bool(data.get("is_error")) or (isinstance(result, dict) and "error" in result),
        "cancelled": result == {"cancelled": True},
        "usage": data.get("usage") or {},
        "attachments": [a for a in data.get("attachments", ()) if isinstance(a, dict)],
    }


def generation_page(session: m.Session, generation: int, params: Any) -> dict[str, Any]:
    """Turns, a page of the transcript, a page of steps and a page of events of one generation."""
    pages = generations.generation_pages(session, generation, params)
    messages, events, steps = pages["messages"], pages["events"], pages["steps"]
    return {
        # not "messages": the admin's base template shows the messages framework's under that name
        "message_page": messages,
        "conversation": [message_view(row, pages["boundaries"]) for row in messages.object_list],
        "events": events,
        "event_rows": [
            {"seq": e.seq, "type": e.type, "turn_id": e.turn_id, "created_at": e.at, "data": pretty_json(data)}
            for e, data in zip(events.object_list, pages["event_data"])
        ],
        "steps": steps,
        "step_rows": [
            {
                "key": key,
                "turn_id": turn_id,
                "message_index": index,
                "created_at": at,
                "data": pretty_json(data) if data is not None else "",
            }
            for key, turn_id, index, data, at in steps.object_list
        ],
        "turns": pages["turns"],
        "child_turns": tree_admin.archived_children(session, generation),
    }


def step_note(key: str, data: Any) -> str:
    """A line for the steps the turn page explains: a compaction says what it did."""
    if key.startswith("compact:") and isinstance(data, dict):
        return (
            f"compaction ({data.get('reason', '?')}): {data.get('messages', '?')} messages summarized; "
            f"the model sees the summary, then the messages from #{data.get('boundary', '?')} on"
        )
    if key.startswith("compact:") and key.endswith(":started"):
        return "compaction started"
    return ""


# -- sessions -----------------------------------------------------------------------------------


@admin.register(m.Session)
class SessionAdmin(ZonedTimes, StaffReadOnly, CheckedModelAdmin):
    list_display = (
        "key",
        "title_shown",
        "agent",
        "owner",
        "status",
        "generation",
        "legal_hold",
        time_column("updated_at", "last active"),
    )
    list_select_related = ("owner",)
    search_fields = ("key", "agent", f"owner__{USERNAME}")
    list_filter = ("agent", "status", "legal_hold", "created_at", "updated_at")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    fields = (
        "agent",
        "key",
        "owner",
        "title_shown",
        "status",
        "generation",
        "event_seq",
        "turn_seq",
        "legal_hold",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields
    change_form_template = "admin/june_archive/session_change_form.html"
    change_list_template = "admin/june_archive/session_change_list.html"  # a link to the search
    Media = A11yMedia
    list_per_page = 50
    show_full_result_count = False  # a COUNT(*) over every session on each list page is not needed
    actions = [hold_sessions, release_sessions, erase_owners]

    def get_queryset(self, request):
        # the title the chat shows: the session's own, else its first message's first line
        first = (
            m.Turn.objects.filter(session=OuterRef("pk"), kind="inbound")
            .order_by("order")
            .annotate(asked=KT("input__text"))
            .values("asked")[:1]
        )
        return super().get_queryset(request).annotate(first_text=Subquery(first))

    @admin.display(description="title", ordering="title")
    def title_shown(self, obj: m.Session) -> str:
        return obj.title or selectors.title_from(getattr(obj, "first_text", None) or "") or "—"

    def get_actions(self, request):
        # erasure and legal holds are for superusers; staff get only the actions that change no
        # session (declared ``@admin.action(permissions=["view"])``: the evals' "Make eval cases")
        actions = super().get_actions(request)
        if request.user.is_superuser:
            return actions
        return {k: a for k, a in actions.items() if tuple(getattr(a[0], "allowed_permissions", ())) == ("view",)}

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        named = f"{info[0]}_{info[1]}"
        extra = [
            path(
                "<path:object_id>/generation/<int:generation>/",
                self.admin_site.admin_view(self.generation_view),
                name="%s_%s_generation" % info,
            ),
            # a person answering in the agent's place (admin/takeover_admin.py)
            *(
                path(
                    f"<path:object_id>/takeover/{suffix}",
                    self.admin_site.admin_view(partial(view, self)),
                    name=f"{named}_takeover{name}",
                )
                for suffix, view, name in (
                    ("", takeover_admin.begin_view, ""),
                    ("say/", takeover_admin.say_view, "_say"),
                    ("handback/", takeover_admin.end_view, "_end"),
                )
            ),
            # search by text and downloads (admin/search_admin.py)
            path(
                "search/", self.admin_site.admin_view(partial(search_admin.search_view, self)), name=f"{named}_search"
            ),
            *(
                path(
                    f"<path:object_id>/generation/<int:generation>/export.{fmt}",
                    self.admin_site.admin_view(partial(search_admin.export_view, self)),
                    {"fmt": fmt},
                    name=f"{named}_export_{fmt}",
                )
                for fmt in ("md", "json")
            ),
        ]
        return extra + super().get_urls()

    def generation_url(self, session: m.Session, generation: int) -> str:
        return reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_generation",
            args=[session.pk, generation],
            current_app=self.admin_site.name,
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        session = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if session is not None and self.has_view_permission(request, session):
            audit_staff_read(request=request, action=m.AuditAction.SESSION_READ, session=session)
            page = generation_rows(session, request.GET.get("g"))
            for row in page.rows:
                row["url"] = self.generation_url(session, row["generation"])
            extra.update(
                generations=page,
                live_url=self.generation_url(session, session.generation),
                usage=console.session_usage(session),
                **takeover_admin.panel(session, request.user),
            )
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def generation_view(self, request, object_id, generation: int):
        session = self.get_object(request, object_id)
        if session is None or not self.has_view_permission(request, session):
            raise Http404("no such session")
        last = max(session.generation_seq, session.generation)
        if not 0 <= generation <= last:
            raise Http404("no such generation")
        audit_staff_read(
            request=request,
            action=m.AuditAction.SESSION_READ if generation == session.generation else m.AuditAction.ARCHIVE_READ,
            session=session,
            generation=generation,
        )
        reset = m.SessionReset.objects.filter(session=session, generation=generation).select_related("by").first()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{session.agent}/{archived_name(session, generation)}",
            "session": session,
            "session_url": reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                args=[session.pk],
                current_app=self.admin_site.name,
            ),
            "generation": generation,
            "archived_name": archived_name(session, generation),
            "live": generation == session.generation,
            "reset": reset,
            "turn_admin": f"admin:{m.Turn._meta.app_label}_{m.Turn._meta.model_name}_change",
            "prev_generation": self.generation_url(session, generation - 1) if generation > 0 else None,
            "next_generation": (self.generation_url(session, generation + 1) if generation < last else None),
            **generation_page(session, generation, request.GET),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/june_archive/generation.html", context)


@admin.register(m.ArchivedSession)
class ArchivedSessionAdmin(SessionAdmin):
    """Only the sessions that were reset at least once, with their latest reset."""

    list_display = ("key", "agent", "owner", "archived_generations", "last_reset_at", "status")
    list_filter = ("agent", "resets__created_at")
    search_fields = ("key", "agent", f"owner__{USERNAME}", f"resets__by__{USERNAME}")
    date_hierarchy = None
    ordering = ("-updated_at",)

    def get_queryset(self, request):
        return super().get_queryset(request).filter(generation__gt=0).annotate(last_reset=Max("resets__created_at"))

    @admin.display(description="archived generations", ordering="generation")
    def archived_generations(self, obj) -> int:
        return obj.generation

    @admin.display(description="last reset", ordering="last_reset")
    def last_reset_at(self, obj):
        return obj.last_reset
