"""Attachments in the admin: what users uploaded, to which session, and the turn that sent it;
read-only (a file is a user's), deletable (its file goes with its row: ``on_attachment_deleted``)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from agents_app.models import Attachment
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.times import ZonedTimes, time_column


@admin.register(Attachment)
class AttachmentAdmin(ZonedTimes, CheckedModelAdmin):
    list_display = (
        "name",
        "content_type",
        "size",
        "pages",
        "agent",
        "session_key",
        "owner",
        "sent",
        time_column("created_at"),
    )
    list_filter = ("content_type", "agent")
    search_fields = ("=id", "name", "session_key", "=turn_id", "=sha256")
    readonly_fields = [f.name for f in Attachment._meta.fields] + ["download"]
    date_hierarchy = "created_at"

    @admin.display(description="turn", ordering="turn_id")
    def sent(self, obj: Attachment) -> str:
        return obj.turn_id or "unsent"

    @admin.display(description="file")
    def download(self, obj: Attachment) -> str:
        url = reverse(
            "june_api:attachment", kwargs={"agent": obj.agent, "session": obj.session_key, "attachment_id": obj.id}
        )
        return format_html('<a href="{}" target="_blank" rel="noopener noreferrer">{}</a>', url, obj.name)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
