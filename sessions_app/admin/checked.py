"""The ModelAdmin every June admin page is built on: a changelist action answers a selection that
names no row of its table with a message, never a 500.

Django's ``response_action`` filters ``pk__in=<the posted _selected_action values>`` as they come:
``nonsense`` for an integer key raises ``ValueError``, a number past the column's range raises
``OverflowError`` (SQLite) or ``DataError`` (PostgreSQL), and a key of no row runs the action on
nothing (Django's delete confirmation of nothing, an erasure of nobody). A forged or stale POST
(a row deleted in another tab) gets "nothing was done" and the changelist again.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db import connections, models
from django.http import HttpResponseRedirect


def parsed_keys(queryset: Any, values: list[str]) -> list[Any] | None:
    """The posted keys as the table's primary key takes them; None when one is not such a key."""
    field = queryset.model._meta.pk
    column = field.target_field if field.is_relation else field
    span = None
    if isinstance(column, models.IntegerField):
        span = connections[queryset.db].ops.integer_field_range(column.get_internal_type())
    keys = []
    for value in values:
        try:
            key = column.to_python(value)
        except ValidationError:
            return None
        if key is None or (span is not None and not span[0] <= key <= span[1]):
            return None
        keys.append(key)
    return keys


class CheckedModelAdmin(admin.ModelAdmin):
    def response_action(self, request: Any, queryset: Any) -> Any:
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        across = forms.BooleanField(required=False).clean(request.POST.get("select_across"))
        if selected and not across:
            keys = parsed_keys(queryset, selected)
            if keys is None:
                return self._nothing_done(request, "The selection names no row of this list")
            if not queryset.filter(pk__in=keys).exists():
                return self._nothing_done(request, "None of the selected rows exists (any more)")
        return super().response_action(request, queryset)

    def _nothing_done(self, request: Any, why: str) -> HttpResponseRedirect:
        self.message_user(request, f"{why}: nothing was done.", messages.WARNING)
        return HttpResponseRedirect(request.get_full_path())
