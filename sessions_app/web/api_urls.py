"""HTTP API routes (namespace ``june_api``), under ``<June's prefix>api/`` (``june.urls``; the
views: ``api``; the contract: ``openapi``)."""

from importlib.util import find_spec
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path, re_path

from sessions_app.web import (
    api,
    approvals,
    branch_api,
    downloads,
    files,
    lists,
    prometheus,
    search_views,
    uimessage_stream,
)

if find_spec("ag_ui") is not None:

    async def agui_run(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        """``agui_stream.agui_run``, imported at its first request: ag-ui-protocol's models (pydantic
        classes, a large import) stay out of a web process that never serves AG-UI."""
        from sessions_app.web.agui_stream import agui_run as run

        return await run(request, **kwargs)

    # as ``api.api_view``'s views: the view checks CSRF itself (cookie callers only)
    agui_run.csrf_exempt = True  # type: ignore[attr-defined]
else:  # a site without the extra: the route answers which one to install
    agui_run = api.extra_missing("agui", "ag-ui-protocol")

app_name = "june_api"

SESSION = "agents/<str:agent>/sessions/<str:session>/"
#: the AI SDK's chat transport (``DefaultChatTransport({ api })``; docs/frontends.md): the chat id is the session key
CHAT = "agents/<str:agent>/chat"

urlpatterns = [
    path("openapi.json", api.openapi_document, name="openapi"),
    path("metrics", prometheus.metrics, name="metrics"),
    path("approvals/", approvals.approval_list, name="approvals"),
    path("approvals/<str:turn_id>/answer", approvals.approval_answer, name="approval-answer"),
    path("search", search_views.api_search, name="search"),
    path("attachments/unsent", files.unsent_attachments, name="unsent-attachments"),
    path("agents/<str:agent>/sessions/", lists.session_list, name="sessions"),
    # without the slash too (the API's other collections, ``…/turns``, ``…/branches``, have none):
    # an alias of the route above, not a route of the document's
    re_path(r"^agents/(?P<agent>[^/]+)/sessions$", lists.session_list),
    path(SESSION, lists.session_detail, name="session"),
    path(SESSION + "turns", lists.turns_collection, name="turns"),
    path(SESSION + "turns/<str:turn_id>", api.turn_detail, name="turn"),
    path(SESSION + "turns/<str:turn_id>/resume", api.turn_resume, name="turn-resume"),
    path(SESSION + "turns/<str:turn_id>/cancel", api.turn_cancel, name="turn-cancel"),
    path(SESSION + "turns/<str:turn_id>/regenerate", branch_api.turn_regenerate, name="turn-regenerate"),
    path(SESSION + "messages/<str:index>/fork", branch_api.message_fork, name="message-fork"),
    path(SESSION + "branches", branch_api.branch_list, name="branches"),
    path(SESSION + "branches/<str:generation>/switch", branch_api.branch_switch, name="branch-switch"),
    path(SESSION + "reset", api.reset, name="reset"),
    path(SESSION + "pending", api.pending, name="pending"),
    path(SESSION + "events", api.events, name="events"),
    path(SESSION + "export", downloads.api_export, name="export"),
    path(SESSION + "attachments", files.attachments_collection, name="attachments"),
    path(SESSION + "attachments/<str:attachment_id>", files.attachment_detail, name="attachment"),
    path(CHAT, uimessage_stream.chat, name="ui-chat"),
    path(CHAT + "/<str:session>/stream", uimessage_stream.chat_stream, name="ui-chat-stream"),
    path(CHAT + "/<str:session>/cancel", uimessage_stream.chat_cancel, name="ui-chat-cancel"),
    path(CHAT + "/<str:session>/messages", uimessage_stream.chat_messages, name="ui-chat-messages"),
    path("agents/<str:agent>/agui", agui_run, name="agui"),
    # anything else under a session is a JSON 404, even with DEBUG on (other /api/ paths, e.g.
    # the webhooks included after this module, keep their own routes; see api.handler404)
    re_path(r"^agents/[^/]+/sessions/", api.not_found),
]
