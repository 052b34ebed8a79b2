"""Admin: per-user API tokens. Creating one shows the raw token once, in a message; only its
hash is stored, so it can never be shown again (create a new one instead)."""

from __future__ import annotations

import secrets

from django.contrib import admin, messages

from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.models import ApiToken, username_field
from sessions_app.times import ZonedTimes, time_column

USERNAME = username_field()


@admin.register(ApiToken)
class ApiTokenAdmin(ZonedTimes, CheckedModelAdmin):
    list_display = ("user", "name", "prefix", time_column("created_at"), time_column("last_used_at"))
    list_select_related = ("user",)
    search_fields = (f"user__{USERNAME}", "name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at")
    autocomplete_fields = ()

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name")
        return ("user", "name", "prefix", "created_at", "last_used_at")

    def get_readonly_fields(self, request, obj=None):
        return (*super().get_readonly_fields(request, obj), *(("user",) if obj is not None else ()))

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        # same shape as ApiToken.issue; the raw value lives only in this message
        raw = "june_" + secrets.token_urlsafe(32)
        obj.prefix, obj.key_hash = raw[:12], ApiToken.hash(raw)
        super().save_model(request, obj, form, change)
        messages.warning(request, f"The new API token for {obj.user}: {raw} — copy it now, it is not shown again.")
