"""Attachments over HTTP (the services: ``sessions_app.attachment_services``; the contract: ``openapi``).

``POST …/attachments`` uploads one file (multipart, field ``file``) and answers its metadata;
``GET …/attachments/<id>`` downloads it (its uploader only, or staff: a 404 for anyone else);
``DELETE …/attachments/<id>`` removes an unsent one. A declared body larger than a file's limit
is refused before it is read.
"""

from __future__ import annotations

import functools
from typing import Any

from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse

from agents_app import attachments as files
from agents_app.runtime.errors import NotFound
from sessions_app import attachment_services as attach
from sessions_app import services
from sessions_app.audit import audit_staff_read
from sessions_app.models import AuditAction
from sessions_app.site_errors import BadRequest
from sessions_app.web.api import api_view
from sessions_app.web.uploads import bounded, uploaded_files


@bounded(functools.partial(attach.max_body_bytes, 1))
@api_view("POST")
def attachments_collection(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """Upload one file (201 with ``{"id", "type", "name", "size", "pages"}``)."""
    found = uploaded_files(request)
    if len(found) != 1:
        raise BadRequest("send exactly one file (field 'file')")
    # someone else's session, or a key a channel owns (webhooks', subagents', a schedule's), is a
    # 403 as for a turn; a new one is created by the first message, not by an upload
    services.session_to_open(agent=agent, key=session, user=user)
    row = attach.attachment_upload(agent=agent, key=session, user=user, upload=found[0])
    return JsonResponse(row.meta(), status=201)


@api_view("GET", "HEAD", "DELETE")
def unsent_attachments(request: HttpRequest, user: Any) -> HttpResponse:
    """The caller's unsent uploads, every session (GET: ``{"attachments": [...]}``, newest
    first), or all of them removed (DELETE: ``{"removed": n}``): what the unsent cap counts."""
    if request.method == "DELETE":
        return JsonResponse({"removed": attach.attachments_remove_unsent(user=user)})
    return JsonResponse({"attachments": attach.attachments_unsent(user=user)})


@api_view("GET", "HEAD", "DELETE")
def attachment_detail(request: HttpRequest, user: Any, agent: str, session: str, attachment_id: str) -> HttpResponse:
    """Download (GET) or remove an unsent upload (DELETE, 204)."""
    if request.method == "DELETE":
        attach.attachment_remove(agent=agent, key=session, attachment_id=attachment_id, user=user)
        return HttpResponse(status=204)
    row = attach.attachment_for_user(agent=agent, key=session, attachment_id=attachment_id, user=user)
    # staff opening someone else's upload (the admin's links): an audit row
    audit_staff_read(
        request=request, user=user, action=AuditAction.ATTACHMENT_READ, owner_id=row.owner_id, attachment_id=row.id
    )
    try:
        handle = row.file.open("rb")
    except OSError:
        raise NotFound("this attachment's file is gone") from None
    # images inline (thumbnails); a PDF downloads, so no viewer runs it on this origin
    response = FileResponse(
        handle, content_type=row.content_type, as_attachment=not files.is_image(row.meta()), filename=row.name
    )
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=3600"
    return response
