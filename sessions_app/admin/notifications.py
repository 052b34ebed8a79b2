"""Notifications' outbox in the admin (``sessions_app.notify``): a read-only list of the rows
with their state, attempts and last error. Staff only (the admin site); nobody adds, edits or
deletes a row here — the sender owns them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from sessions_app.admin.a11y import A11yMedia
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.models import Notification
from sessions_app.times import ZonedTimes, time_column


@admin.register(Notification)
class NotificationAdmin(ZonedTimes, CheckedModelAdmin):
    list_display = (
        time_column("created_at"),
        "kind",
        "channel",
        "state",
        "attempts",
        time_column("next_at"),
        "subject",
        "last_error",
    )
    Media = A11yMedia
    list_filter = ("state", "kind", "channel")
    search_fields = ("turn_id", "subject")
    ordering = ("-created_at",)
    readonly_fields = [f.name for f in Notification._meta.fields]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: Any, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)
