"""The admin's privacy actions on sessions (superusers only).

"Erase the owners' data": a confirmation page lists the users whose data would go and what they
have; confirming erases each (``privacy.user_erase``) and says what went. "Cancel their
unfinished turns first" chooses what a running turn does: without it, a user with one is refused
and keeps everything.

"Place under legal hold" / "Release the legal hold": a held session is never deleted by
retention nor by an erasure of its owner (docs/privacy.md)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from sessions_app import models as m
from sessions_app import privacy
from sessions_app.site_errors import UserBusy


@admin.action(description="Erase the owners' data (every session, upload, token, …)")
def erase_owners(model_admin: Any, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
    if not (request.user.is_active and request.user.is_superuser):
        model_admin.message_user(request, "Only a superuser may erase a user's data.", messages.ERROR)
        return None
    owner_ids = sorted({pk for pk in queryset.values_list("owner_id", flat=True) if pk is not None})
    owners = list(
        get_user_model()
        .objects.filter(pk__in=owner_ids)
        .annotate(n_sessions=Count("agent_sessions", distinct=True))
        .order_by("pk")
    )
    if not owners:
        model_admin.message_user(request, "None of these sessions has an owner: nothing to erase.", messages.WARNING)
        return None
    if request.POST.get("confirmed") != "yes":
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": "Erase these users' data?",
            "owners": owners,
            "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
            "action": "erase_owners",
            "busy": set(
                m.Turn.objects.filter(session__owner__in=owners, status__in=m.CHAIN_BLOCKING).values_list(
                    "session__owner_id", flat=True
                )
            ),
        }
        return TemplateResponse(request, "admin/june_archive/erase_confirm.html", context)
    cancel = request.POST.get("cancel_running") == "on"
    for user in owners:
        try:
            report = privacy.user_erase(user=user, cancel=cancel, actor=request.user, request=request)
        except UserBusy as exc:
            model_admin.message_user(request, f"{user.get_username()}: not erased: {exc}", messages.ERROR)
            continue
        said = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in report.items()) or "nothing was kept"
        model_admin.message_user(request, f"Erased the data of {user.get_username()}: {said}.", messages.SUCCESS)
    return None


def _superuser(model_admin: Any, request: HttpRequest) -> bool:
    if request.user.is_active and request.user.is_superuser:
        return True
    model_admin.message_user(request, "Only a superuser may change a legal hold.", messages.ERROR)
    return False


@admin.action(description="Place under legal hold (never deleted)")
def hold_sessions(model_admin: Any, request: HttpRequest, queryset: QuerySet) -> None:
    if _superuser(model_admin, request):
        n = m.Session.objects.filter(pk__in=queryset.values("pk")).update(legal_hold=True)
        model_admin.message_user(request, f"{n} session(s) under legal hold.", messages.SUCCESS)


@admin.action(description="Release the legal hold")
def release_sessions(model_admin: Any, request: HttpRequest, queryset: QuerySet) -> None:
    if _superuser(model_admin, request):
        n = m.Session.objects.filter(pk__in=queryset.values("pk")).update(legal_hold=False)
        model_admin.message_user(request, f"{n} session(s) released from legal hold.", messages.SUCCESS)
