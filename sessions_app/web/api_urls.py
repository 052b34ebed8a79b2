"""HTTP API routes, mounted under /api/ (the views: ``api``; the contract: ``openapi``)."""

from django.urls import path, re_path

from sessions_app.web import api, approvals, lists

SESSION = "agents/<str:agent>/sessions/<str:session>/"

urlpatterns = [
    path("openapi.json", api.openapi_document, name="api-openapi"),
    path("approvals/", approvals.approval_list, name="api-approvals"),
    path("approvals/<str:turn_id>/answer", approvals.approval_answer, name="api-approval-answer"),
    path("agents/<str:agent>/sessions/", lists.session_list, name="api-sessions"),
    path(SESSION + "turns", lists.turns_collection, name="api-turns"),
    path(SESSION + "turns/<str:turn_id>", api.turn_detail, name="api-turn"),
    path(SESSION + "turns/<str:turn_id>/resume", api.turn_resume, name="api-turn-resume"),
    path(SESSION + "turns/<str:turn_id>/cancel", api.turn_cancel, name="api-turn-cancel"),
    path(SESSION + "reset", api.reset, name="api-reset"),
    path(SESSION + "pending", api.pending, name="api-pending"),
    path(SESSION + "events", api.events, name="api-events"),
    # anything else under a session is a JSON 404, even with DEBUG on (other /api/ paths, e.g.
    # the webhooks included after this module, keep their own routes; see api.handler404)
    re_path(r"^agents/[^/]+/sessions/", api.not_found),
]
