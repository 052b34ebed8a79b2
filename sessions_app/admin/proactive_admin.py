"""Admin for proactive turns: the agents' schedules (enable/disable, next run, last run and its
turn, run now) and webhook deliveries (failures, retry)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from agents_app.cron import declarations, next_tick
from agents_app.models import AgentSchedule, ScheduleRun, WebhookDelivery
from sessions_app import wiring
from sessions_app.admin.a11y import A11yMedia
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.models import Turn
from sessions_app.outbox.deliveries import delivery_retry
from sessions_app.outbox.queue import FIRE
from sessions_app.times import ZonedTimes, time_column, time_html


def _turn_link(turn_id: str) -> str:
    try:
        url = reverse("admin:sessions_app_turn_change", args=[turn_id])
    except NoReverseMatch:
        return turn_id
    return format_html('<a href="{}">{}</a>', url, turn_id)


@admin.register(AgentSchedule)
class AgentScheduleAdmin(CheckedModelAdmin):
    list_display = (
        "name",
        "cron_zone",
        "enabled",
        "next_run_local",
        "last_run_at",
        "last_run_turn",
        "last_run_status",
        "run_now_button",
    )
    fields = ("name", "func", "kwargs", "cron", "next_run", "repeats")
    readonly_fields = ("name", "func", "kwargs")
    actions = ("enable", "disable", "run_now")
    search_fields = ("name",)
    Media = A11yMedia

    def get_queryset(self, request):
        return super().get_queryset(request).filter(func=FIRE)

    def has_add_permission(self, request) -> bool:
        return False  # schedules are declared in agent.py and synced on deploy

    def _last(self, obj) -> ScheduleRun | None:
        cache = getattr(self, "_last_cache", None)
        if cache is None or cache[0] is not obj:
            self._last_cache = (obj, ScheduleRun.objects.filter(schedule=obj.name).order_by("-fired_at").first())
        return self._last_cache[1]

    def _tz(self, obj) -> ZoneInfo:
        """The schedule's own zone (its declaration's ``timezone``), else the site's."""
        try:
            _, agent, name = obj.name.split(":", 2)
            decl = next(
                (d for d in declarations(wiring.agent(agent), default_tz=settings.TIME_ZONE) if d.name == name), None
            )
        except Exception:  # an agent gone since the sync: the site's zone
            decl = None
        return decl.tz() if decl else ZoneInfo(settings.TIME_ZONE)

    @admin.display(description="cron", ordering="cron")
    def cron_zone(self, obj) -> str:
        """The cron expression in the zone it runs in (the agent's declaration's, else the site's)."""
        return f"{obj.cron} ({self._tz(obj).key})" if obj.cron else "—"

    @admin.display(description="next run", ordering="next_run")
    def next_run_local(self, obj):
        """In the reader's zone, labelled, as every time (``june_time``)."""
        return time_html(obj.next_run)

    @admin.display(description="run now")
    def run_now_button(self, obj):
        # the row is inside the changelist's form (forms do not nest): the button posts that
        # form, CSRF token included, to this schedule's run-now URL instead
        url = reverse("admin:agents_app_agentschedule_run_now", args=[obj.pk])
        return format_html(
            '<button type="submit" formaction="{}" formmethod="post" class="button june-run-now"{}>Run now</button>',
            url,
            " disabled" if obj.repeats == 0 else "",
        )

    def get_urls(self):
        run_now = path(
            "<int:pk>/run-now/", self.admin_site.admin_view(self.run_now_view), name="agents_app_agentschedule_run_now"
        )
        return [run_now, *super().get_urls()]

    def run_now_view(self, request, pk: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        n = self.get_queryset(request).filter(pk=pk).exclude(repeats=0).update(next_run=timezone.now())
        self.message_user(
            request,
            f"{n} schedule(s) due now" if n else "Not run: the schedule is disabled or gone",
            messages.SUCCESS if n else messages.WARNING,
        )
        return HttpResponseRedirect(reverse("admin:agents_app_agentschedule_changelist"))

    @admin.display(boolean=True)
    def enabled(self, obj) -> bool:
        return obj.repeats != 0

    @admin.display(description="last run")
    def last_run_at(self, obj):
        """When it ran (a Run now runs at once, whatever tick it is filed under)."""
        run = self._last(obj)
        return time_html(run.fired_at) if run else "—"

    @admin.display(description="its turn")
    def last_run_turn(self, obj):
        run = self._last(obj)
        return _turn_link(run.turn_id) if run else "—"

    @admin.display(description="run status")
    def last_run_status(self, obj):
        run = self._last(obj)
        if run is None:
            return "—"
        turn = Turn.objects.filter(pk=run.turn_id).values_list("status", flat=True).first()
        return f"{run.status} / turn {turn or 'not started'}" + (f": {run.error[:100]}" if run.error else "")

    @admin.action(description="Enable the selected schedules")
    def enable(self, request, queryset):
        n = queryset.update(repeats=-1)
        self.message_user(request, f"{n} schedule(s) enabled")

    @admin.action(description="Disable the selected schedules")
    def disable(self, request, queryset):
        n = queryset.update(repeats=0)
        self.message_user(request, f"{n} schedule(s) disabled")

    @admin.action(description="Run the selected schedules now (at the next scheduler pass)")
    def run_now(self, request, queryset):
        n = queryset.exclude(repeats=0).update(next_run=timezone.now())
        self.message_user(request, f"{n} schedule(s) due now")

    def save_model(self, request, obj, form, change):
        if "cron" in form.changed_data and "next_run" not in form.changed_data:
            _, agent, name = obj.name.split(":", 2)
            decl = next(
                (d for d in declarations(wiring.agent(agent), default_tz=settings.TIME_ZONE) if d.name == name), None
            )
            tz = decl.tz() if decl else ZoneInfo(settings.TIME_ZONE)
            obj.next_run = next_tick(obj.cron, tz, timezone.now())
        super().save_model(request, obj, form, change)


@admin.register(ScheduleRun)
class ScheduleRunAdmin(ZonedTimes, CheckedModelAdmin):
    list_display = (
        "schedule",
        time_column("tick"),
        "session_key",
        "turn",
        "status",
        time_column("fired_at", "ran at"),
        time_column("delivered_at"),
    )
    Media = A11yMedia
    list_filter = ("status", "schedule")
    readonly_fields = [f.name for f in ScheduleRun._meta.fields]

    @admin.display(description="turn")
    def turn(self, obj):
        return _turn_link(obj.turn_id)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ZonedTimes, CheckedModelAdmin):
    list_display = (
        "turn",
        "agent",
        "session_key",
        "url",
        "status",
        "attempts",
        "response_status",
        "short_error",
        time_column("updated_at"),
    )
    list_filter = ("status", "agent")
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]
    actions = ("retry",)

    @admin.display(description="turn")
    def turn(self, obj):
        return _turn_link(obj.turn_id)

    @admin.display(description="last error")
    def short_error(self, obj):
        return obj.last_error[:120]

    @admin.action(description="Retry the selected failed deliveries")
    def retry(self, request, queryset):
        n = sum(delivery_retry(delivery_id=pk) for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"{n} delivery(ies) queued again", messages.SUCCESS if n else messages.WARNING)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
