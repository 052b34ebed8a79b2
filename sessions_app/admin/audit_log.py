"""The audit log in the admin: superusers browse it, filter it and export what they filtered as
CSV (``…/auditevent/export.csv?<the list's filters>``); nobody adds, changes or deletes a row
here (and on PostgreSQL the database refuses it too). The search box takes a username or a user
id as well: it finds the rows whose subject is that user (``subject_of``). Also the usage totals
of deleted turns (``UsageTotal``), read-only for staff."""

from __future__ import annotations

import csv
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import path

from sessions_app import models as m
from sessions_app.admin.a11y import A11yMedia
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.admin.sessions import StaffReadOnly
from sessions_app.times import ZonedTimes, time_column

CSV_FIELDS = (
    "id",
    "at",
    "action",
    "actor_id",
    "actor",
    "subject",
    "session_id",
    "generation",
    "turn_id",
    "attachment_id",
    "remote_addr",
    "detail",
)


class _Echo:
    def write(self, value: str) -> str:
        return value


@admin.register(m.AuditEvent)
class AuditEventAdmin(ZonedTimes, CheckedModelAdmin):
    list_display = (
        time_column("at", "at"),
        "action",
        "actor",
        "subject",
        "session_id",
        "generation",
        "turn_id",
        "remote_addr",
    )
    list_filter = ("action", "at")
    search_fields = ("=actor", "=actor_id", "=subject", "=turn_id", "=attachment_id", "=remote_addr")
    date_hierarchy = "at"
    readonly_fields = CSV_FIELDS
    change_list_template = "admin/june_audit/audit_change_list.html"
    actions = None
    list_per_page = 100
    show_full_result_count = False
    Media = A11yMedia

    def _superuser(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> tuple[Any, bool]:
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if not term:
            return found, duplicates
        subjects = {m.subject_of(term)}
        user = get_user_model()
        named = user.objects.filter(**{user.USERNAME_FIELD: term}).values_list("pk", flat=True).first()
        if named is not None:
            subjects.add(m.subject_of(named))
        return found | queryset.filter(subject__in=subjects), duplicates

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("export.csv", self.admin_site.admin_view(self.export_view), name="%s_%s_export" % info),
            *super().get_urls(),
        ]

    def export_view(self, request: HttpRequest) -> StreamingHttpResponse:
        """The rows the list shows with the same filters and search, every page of them, as CSV."""
        if not self._superuser(request):
            raise PermissionDenied
        rows = self.get_changelist_instance(request).get_queryset(request).values_list(*CSV_FIELDS)
        writer = csv.writer(_Echo())

        def lines():
            yield writer.writerow(CSV_FIELDS)
            for row in rows.iterator(chunk_size=2000):
                yield writer.writerow([_cell(v) for v in row])

        response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="june-audit.csv"'
        return response


def _cell(value: Any) -> str:
    """A CSV cell that a spreadsheet does not run as a formula."""
    text = "" if value is None else (value.isoformat() if hasattr(value, "isoformat") else str(value))
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        text = "'" + text
    return text


@admin.register(m.UsageTotal)
class UsageTotalAdmin(StaffReadOnly, CheckedModelAdmin):
    """What turns deleted by retention or an erasure spent, per agent and day (read-only)."""

    list_display = ("day", "agent", "turns", "usage")
    list_filter = ("agent",)
    date_hierarchy = "day"
    ordering = ("-day", "agent")
