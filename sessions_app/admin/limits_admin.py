"""Admin: a user's or a group's own rate limit and token quota, over the site's settings
(``sessions_app.quotas``; a web process applies an edit within ``JUNE_QUOTA_CACHE_SECONDS``)."""

from __future__ import annotations

from django.contrib import admin

from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.models import QuotaOverride, username_field

USERNAME = username_field()


@admin.register(QuotaOverride)
class QuotaOverrideAdmin(CheckedModelAdmin):
    list_display = ("__str__", "turns_per_minute", "tokens_per_day", "note")
    list_select_related = ("user", "group")
    search_fields = (f"user__{USERNAME}", "group__name", "note")
    fields = ("user", "group", "turns_per_minute", "tokens_per_day", "note")
