"""The approval inbox: parked inputs the signed-in operator may answer, and the answer page.

Listing and answering go through the same rule (the agent's ``authorize_answer``, evaluated
now, via ``services.may_answer`` / ``services.turn_resume``), so a request that is not listed
cannot be answered either. The admin is a thin entry point: it builds a form from the
request's JSON schema, calls ``turn_resume`` and maps its errors (403/409/422/500) to admin
messages; the turn stays parked and answerable after any error. The form: ``answer_form``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from agents_app.runtime import rules
from agents_app.runtime.errors import JuneError, ResumeAuthorizationError, TurnNotResumable
from sessions_app import audit, listings, selectors, services, takeover
from sessions_app import models as m
from sessions_app.admin.a11y import A11yMedia
from sessions_app.admin.answer_form import AnswerForm, form_kind  # noqa: F401 (AnswerForm: re-exported)
from sessions_app.admin.checked import CheckedModelAdmin
from sessions_app.admin.inbox_row import inline_answer, take_over_button
from sessions_app.site_errors import Unprocessable

log = logging.getLogger(__name__)

# -- the inbox ----------------------------------------------------------------------------------------


def parked_turns():
    """Every parked input in a live generation, oldest first, with when it parked."""
    return listings.parked_requests()


def waiting_count(user: Any) -> int:
    """How many parked requests ``user`` may answer now (the inbox title, the admin index)."""
    return len(answerable_ids(user, parked_turns()))


def answerable_ids(user: Any, turns) -> list[str]:
    """The turns ``user`` may answer. The verdict depends only on the agent and the request's
    answerers rule, so the hook runs once per distinct (agent, rule), not once per turn."""
    verdicts: dict[tuple[str, str], bool] = {}
    ids = []
    for turn in turns:
        rule = json.dumps(((turn.pending or {}).get("request") or {}).get("answerers"), sort_keys=True, default=str)
        key = (turn.session.agent, rule)
        if key not in verdicts:
            verdicts[key] = services.may_answer(turn=turn, user=user)
        if verdicts[key]:
            ids.append(turn.pk)
    return ids


def _spec(turn: m.Turn, input_id: Any = None) -> dict[str, Any]:
    """The parked request ``input_id`` names (a turn waits on several when one model step's
    parallel calls each need approval), else its first."""
    owed = rules.pending_requests(turn.pending)
    return next((r for r in owed if r.get("id") == input_id), owed[0] if owed else {})


def _call_json(turn: m.Turn) -> str:
    return json.dumps(((turn.pending or {}).get("call") or {}).get("input"), indent=1, sort_keys=True, default=str)


def _last_request(turn: m.Turn) -> dict[str, Any]:
    """An answered turn no longer holds its request: its ``input.requested`` event still does."""
    event = turn.logged().filter(type="input.requested").order_by("-seq").first()
    request = (event.data or {}).get("request") if event else None
    return request if isinstance(request, dict) else {}


def _turn_admin_url(turn: m.Turn) -> str:
    try:
        return reverse("admin:sessions_app_turn_change", args=(quote(turn.pk),))
    except NoReverseMatch:  # the turns admin is optional
        return ""


def _with_json(answers) -> list[m.Answer]:
    rows = list(answers)
    for a in rows:
        a.answer_json = json.dumps(a.answer, sort_keys=True, default=str)
    return rows


def _remote_addr(request) -> str:
    # the socket peer; behind a proxy, configure the proxy to set REMOTE_ADDR (never trust XFF here)
    return str(request.META.get("REMOTE_ADDR") or "")[:64]


def _audit_shown(request, turns) -> None:
    audit.audit_staff_list(
        request=request,
        action=m.AuditAction.INBOX_READ,
        seen=[(t.session_id, t.session.owner_id, t.pk) for t in turns],
    )


@admin.register(m.ApprovalRequest)
class ApprovalInboxAdmin(CheckedModelAdmin):
    list_display = ("prompt", "agent", "session_key", "requested_by", "tool_call", "waited", "turn_link")
    list_display_links = ("prompt",)
    list_per_page = 50
    actions = None
    change_list_template = "admin/june/approval_change_list.html"
    Media = A11yMedia

    # any active staff user may open the inbox; what they see is decided by authorize_answer
    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_change_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_list_display(self, request):
        """The columns, and last Approve/Deny in the row itself (each request used to be opened)."""

        @admin.display(description="answer")
        def answer(turn):
            spec = (turn.pending or {}).get("request") or {}
            return inline_answer(turn, form_kind(spec.get("schema")))

        holders = dict(
            m.Takeover.objects.filter(ended_at__isnull=True).values_list("session_id", "operator_name")
        )  # the sessions a person answers in now: few

        @admin.display(description="person")
        def person(turn):
            allowed = turn.session_id not in holders and takeover.may_take_over(session=turn.session, user=request.user)
            return take_over_button(turn, holder=holders.get(turn.session_id), allowed=allowed)

        return (*self.list_display, answer, person)

    def get_queryset(self, request):
        turns = parked_turns()
        return turns.filter(pk__in=answerable_ids(request.user, turns))

    @admin.display(description="request")
    def prompt(self, turn):
        owed = rules.pending_requests(turn.pending)
        text = (owed[0] if owed else {}).get("prompt") or "(no prompt)"
        return f"{text} (and {len(owed) - 1} more of this step)" if len(owed) > 1 else text

    @admin.display(description="agent", ordering="session__agent")
    def agent(self, turn):
        return turn.session.agent

    @admin.display(description="session", ordering="session__key")
    def session_key(self, turn):
        """The session's title (its first message's, as the chat shows it); the key on hover."""
        session = turn.session
        if not hasattr(session, "display_title"):
            selectors.with_titles([session])
        title = getattr(session, "display_title", None) or session.title or session.key
        try:
            url = reverse("admin:sessions_app_session_generation", args=(turn.session_id, turn.generation))
        except NoReverseMatch:
            return format_html('<span title="{}">{}</span>', session.key, title)
        return format_html('<a href="{}" title="{}">{}</a>', url, session.key, title)

    @admin.display(description="requested by")
    def requested_by(self, turn):
        return listings.requested_by(turn) or "—"

    @admin.display(description="turn")
    def turn_link(self, turn):
        url = _turn_admin_url(turn)
        return format_html('<a href="{}">timeline</a>', url) if url else "—"

    @admin.display(description="tool call")
    def tool_call(self, turn):
        call = (turn.pending or {}).get("call") or {}
        return format_html("<code>{}</code><pre>{}</pre>", call.get("name", "?"), _call_json(turn))

    @admin.display(description="waiting", ordering="parked_at")
    def waited(self, turn):
        return timesince(turn.parked_at, timezone.now())

    # -- pages ----------------------------------------------------------------------------------------

    def changelist_view(self, request, extra_context=None):
        waiting = waiting_count(request.user)
        title = f"Approval inbox ({waiting} waiting)" if waiting else "Approval inbox"
        response = super().changelist_view(request, {"title": title, **(extra_context or {})})
        shown = getattr(response, "context_data", None) or {}
        if "cl" in shown:  # the requests on this page, each quoting what a user wrote or asked
            _audit_shown(request, shown["cl"].result_list)
        return response

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        from sessions_app.admin.console import dashboard_view
        from sessions_app.admin.mcp_admin import mcp_view

        mine = [
            path("answers/", self.admin_site.admin_view(self.answers_view), name="%s_%s_answers" % info),
            # the operator console, in whatever admin site registers June's models (a host's
            # own too); this repository's site also serves it at /admin/june/dashboard/
            path("dashboard/", self.admin_site.admin_view(dashboard_view), name="%s_%s_dashboard" % info),
            path("dashboard/mcp/", self.admin_site.admin_view(mcp_view), name="%s_%s_mcp" % info),
        ]
        return mine + super().get_urls()

    def answers_view(self, request):
        """Past answers: all of them for holders of ``view_answer`` (superusers), else one's own."""
        rows = m.Answer.objects.select_related("turn__session", "user").order_by("-created_at", "-pk")
        if not request.user.has_perm("sessions_app.view_answer"):
            rows = rows.filter(user=request.user)
        answers = _with_json(rows[:200])
        _audit_shown(request, [a.turn for a in answers])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Past answers",
            "answers": answers,
        }
        return TemplateResponse(request, "admin/june/approval_answers.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        turn = m.ApprovalRequest.objects.select_related("session").filter(pk=unquote(object_id)).first()
        if turn is None:
            return self._refused(request, "No such request.", status=404)
        if request.method == "POST":
            return self._answer(request, turn)
        if not self._may_see(request, turn):
            return self._refused(request, "You may not answer this request.", status=403)
        audit.audit_staff_read(request=request, action=m.AuditAction.TURN_READ, session=turn.session, turn_id=turn.pk)
        return self._page(request, turn, form=self._form(turn, input_id=request.GET.get("input")))

    def _form(self, turn, data=None, input_id: Any = None) -> AnswerForm | None:
        spec = _spec(turn, data.get("input_id") if data is not None else input_id)
        if turn.status != m.TurnStatus.SUSPENDED or not spec:
            return None
        return AnswerForm(data, request_spec=spec, initial={"input_id": spec.get("id")})

    def _answer(self, request, turn):
        form = self._form(turn, request.POST)
        try:
            if form is None:
                raise TurnNotResumable("this turn is not waiting for an answer (any more)")
            if not form.is_valid():
                raise Unprocessable(f"invalid answer: {form.errors_text()}")
            else:
                answer, input_id = form.answer(), form.cleaned_data["input_id"]
            rec = services.turn_resume(
                turn_id=turn.pk,
                input_id=input_id,
                answer=answer,
                user=request.user,
                via="admin",
                remote_addr=_remote_addr(request),
                check_session_access=False,
            )
        except ResumeAuthorizationError as exc:
            return self._refused(request, f"You may not answer this request: {exc}", status=403)
        except JuneError as exc:
            if exc.http_status >= 500:
                log.exception("answering turn %s from the admin failed", turn.pk)
                text = "The agent's authorize_answer failed; nothing was applied, you can try again."
            else:
                text = f"Not answered ({exc.http_status}): {exc}"
            messages.error(request, text)
            turn.refresh_from_db()
            if not self._may_see(request, turn):
                return self._refused(request, text, status=exc.http_status, with_message=False)
            return self._page(
                request, turn, form=form if exc.http_status == 422 else self._form(turn), status=exc.http_status
            )
        messages.success(request, f"Answer recorded; the turn is {rec.status}.")
        if request.POST.get("from") == "inbox":  # answered in the list: back to what still waits
            return HttpResponseRedirect(reverse("admin:sessions_app_approvalrequest_changelist"))
        return HttpResponseRedirect(reverse("admin:sessions_app_approvalrequest_change", args=(quote(turn.pk),)))

    def _can_answer(self, request, turn) -> bool:
        return bool(
            turn.status == m.TurnStatus.SUSPENDED and turn.pending and services.may_answer(turn=turn, user=request.user)
        )

    def _may_see(self, request, turn) -> bool:
        """The request's details: to whoever may answer it now, whoever answered it, and
        holders of ``view_answer`` (who see it read-only unless they may answer too)."""
        return (
            self._can_answer(request, turn)
            or request.user.has_perm("sessions_app.view_answer")
            or m.Answer.objects.filter(turn=turn, user=request.user).exists()
        )

    def _page(self, request, turn, *, form, status: int = 200):
        if form is not None and not self._can_answer(request, turn):
            form = None
        pending = turn.pending or {}
        parked = parked_turns().filter(pk=turn.pk).first()
        spec = (form.request_spec if form is not None else _spec(turn, request.GET.get("input"))) or _last_request(turn)
        call = pending.get("call") or {}
        if spec.get("kind") == "tool_approval" and pending:  # its own call, of the step's several
            call = {
                "name": spec.get("tool"),
                "id": spec.get("id", "").removeprefix("approve:"),
                "input": spec.get("input"),
            }
        others = [r for r in rules.pending_requests(pending) if r.get("id") != spec.get("id")]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Answer a parked request",
            "turn": turn,
            "form": form,
            "kind": form.kind if form else None,
            "request_spec": spec,
            "schema_json": json.dumps(spec.get("schema"), sort_keys=True) if spec.get("schema") else "",
            "call": call,
            "others": others,
            "call_json": json.dumps(call.get("input"), indent=1, sort_keys=True, default=str) if pending else "",
            "waited": timesince(parked.parked_at, timezone.now()) if parked else None,
            "turn_url": _turn_admin_url(turn),
            "takeover_held": takeover.open_takeover(turn.session),
            "may_take_over": takeover.may_take_over(session=turn.session, user=request.user),
            "answers": _with_json(
                m.Answer.objects.filter(turn=turn).select_related("user").order_by("created_at", "pk")
            ),
        }
        return TemplateResponse(request, "admin/june/approval_answer.html", context, status=status)

    def _refused(self, request, text: str, *, status: int, with_message: bool = True):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Not available",
            "reason": text if with_message else "",
        }
        return TemplateResponse(request, "admin/june/approval_refused.html", context, status=status)
