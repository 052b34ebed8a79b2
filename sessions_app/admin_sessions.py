"""Sessions, turns (with the journal) and the archive of generations, read-only for staff."""

from django.contrib import admin

from . import models as m


@admin.register(m.Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("key", "agent", "owner", "status", "generation", "updated_at")
    search_fields = ("key", "agent", "owner__username")
    list_filter = ("agent", "status")
    readonly_fields = [f.name for f in m.Session._meta.fields]

    def has_add_permission(self, request):
        return False
