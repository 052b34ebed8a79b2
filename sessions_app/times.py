"""One format for every time a person reads, with its zone: ``2026-12-06 09:00:05 Europe/Paris``
(the date, a 24-hour clock, the zone's IANA name).

The server writes it in the active zone (``settings.TIME_ZONE``, or whatever zone the host's
middleware activates for the request) inside ``<time datetime="…" data-june-time>``; the page's
``static/june/time.js`` (the same format, in JavaScript) rewrites each into the reader's own zone,
the browser's. Templates use the ``june_time`` filter (``{{ at|june_time }}``, ``{{ at|june_time:"ms" }}``
with milliseconds); admin columns ``time_column``, Python code ``time_html`` and ``time_text``.
June's pages load ``june/time.js`` in their own ``scripts`` block (a host's base template, which
replaces ``june/base.html``, keeps that block), the admin's through ``A11yMedia``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

from django.contrib import admin
from django.db import models
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst

#: the browser half of the helper, as a ModelAdmin's ``Media`` lists it
TIME_JS = "june/time.js"
NONE = "—"


def zone_name(tz: Any) -> str:
    """``Europe/Paris``; ``UTC`` for UTC however it is spelled."""
    name = getattr(tz, "key", None) or getattr(tz, "zone", None) or str(tz)
    return "UTC" if name in ("UTC", "Etc/UTC", "utc") else name


def time_text(at: dt.datetime | None, *, ms: bool = False, tz: Any = None) -> str:
    """``at`` in the active zone (or ``tz``) with the zone's name, as plain text."""
    if at is None:
        return NONE
    tz = tz or timezone.get_current_timezone()
    local = timezone.localtime(at, tz) if timezone.is_aware(at) else at.replace(tzinfo=tz)
    fraction = f".{local.microsecond // 1000:03d}" if ms else ""
    return f"{local:%Y-%m-%d %H:%M:%S}{fraction} {zone_name(tz)}"


def time_html(at: dt.datetime | None, *, ms: bool = False) -> SafeString | str:
    """``time_text`` in a ``<time>`` element that ``time.js`` rewrites into the reader's zone."""
    if at is None:
        return NONE
    iso = (at if timezone.is_aware(at) else timezone.make_aware(at)).astimezone(dt.UTC).isoformat()
    return format_html(
        '<time datetime="{}" data-june-time="{}">{}</time>', iso, "ms" if ms else "", time_text(at, ms=ms)
    )


def time_column(field: str, description: str = "") -> Callable[[Any], Any]:
    """A ``list_display`` column showing the datetime ``field`` (sortable by it) in the format."""

    def show(obj: Any) -> SafeString | str:
        return time_html(getattr(obj, field, None))

    show.__name__ = field  # its cells' class: ``field-<name>``, as the plain field's were
    return admin.display(description=description or field.replace("_", " "), ordering=field)(show)


#: the name a read-only datetime field takes on a ``ZonedTimes`` admin page (a model field's own
#: name would be rendered by Django's ``display_for_field``, in Django's format, without a zone)
ZONED = "{}_zoned"


class ZonedTimes:
    """A ModelAdmin mixin: its read-only datetime fields are shown in the one format, with their
    zone (``time_html``), on the change page (a turn's ``created_at``, an audit row's ``at``).
    Each becomes a read-only callable of the same label in the same place of the fieldsets.
    An editable one (a schedule's ``next_run``) names in its label the zone its date and time
    inputs are shown and read in (the active zone): its inputs alone cannot say it."""

    def formfield_for_dbfield(self, db_field: Any, request: Any, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)  # type: ignore[misc]
        if field is not None and isinstance(db_field, models.DateTimeField):
            zone = zone_name(timezone.get_current_timezone())
            field.label = f"{field.label or capfirst(db_field.verbose_name)} ({zone})"
            said = f"A date and a time in {zone}, the site's zone."
            field.help_text = f"{field.help_text} {said}" if field.help_text else said
        return field

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return [
            _zoned_attr(type(self), self.model, name)  # type: ignore[attr-defined]
            if isinstance(name, str) and _is_datetime(self.model, name)  # type: ignore[attr-defined]
            else name
            for name in super().get_readonly_fields(request, obj)  # type: ignore[misc]
        ]

    def get_fieldsets(self, request: Any, obj: Any = None) -> Any:
        """The fieldsets with each field ``get_readonly_fields`` zoned under its zoned name (a
        subclass whose ``get_readonly_fields`` does not call this one's keeps Django's)."""
        zoned = {n for n in self.get_readonly_fields(request, obj) if isinstance(n, str)}

        def place(names: Any) -> list[Any]:
            return [
                tuple(place(n)) if isinstance(n, list | tuple) else ZONED.format(n) if ZONED.format(n) in zoned else n
                for n in names
            ]

        return [
            (title, {**options, "fields": place(options.get("fields", ()))})
            for title, options in super().get_fieldsets(request, obj)  # type: ignore[misc]
        ]


def _is_datetime(model: Any, name: str) -> bool:
    try:
        return isinstance(model._meta.get_field(name), models.DateTimeField)
    except Exception:  # noqa: BLE001 - not a field (a callable, a property): left as it is
        return False


def _zoned_attr(admin_class: type, model: Any, name: str) -> str:
    """The read-only callable showing ``name`` on ``admin_class``'s pages (made once)."""
    attr = ZONED.format(name)
    if attr not in admin_class.__dict__:
        label = str(model._meta.get_field(name).verbose_name)

        def show(self: Any, obj: Any) -> SafeString | str:
            return time_html(getattr(obj, name, None))

        setattr(admin_class, attr, admin.display(description=label)(show))
    return attr
