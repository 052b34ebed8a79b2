"""Admin: the notifications outbox (sessions_app/notify.py), read-only — what was sent to whom,
what waits for its next attempt and why the last one failed."""

from __future__ import annotations

from django.contrib import admin

from sessions_app.models import Notification


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("created_at", "kind", "channel", "recipient", "state", "attempts", "next_attempt_at", "sent_at")
    list_filter = ("state", "kind", "channel")
    search_fields = ("recipient", "subject", "turn__id")
    readonly_fields = [f.name for f in Notification._meta.fields]
    ordering = ("-created_at",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
