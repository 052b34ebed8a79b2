"""Reading uploads from a request: the declared size checked before the body is parsed, the
files of a multipart body bounded by the message limit, and a multipart ``POST …/turns``
(text + files) turned into the JSON start it stands for."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from agents_app.runtime.errors import JuneError
from sessions_app import attachment_services as attach
from sessions_app import services
from sessions_app.site_errors import BadRequest, PayloadTooLarge, error_body
from sessions_app.web.bodylimit import max_body
from sessions_app.web.inputs import validated
from sessions_app.web.shapes_turns import StartTurn, TurnForm


def is_multipart(request: HttpRequest) -> bool:
    return request.content_type.startswith("multipart/form-data")


def check_declared_size(request: HttpRequest, limit: int) -> None:
    """413 for a Content-Length over ``limit`` (parsing would spool it to disk first)."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit():
        raise BadRequest("malformed Content-Length")
    if int(declared) > limit:
        raise PayloadTooLarge(
            f"an attachment is at most {settings.JUNE_ATTACHMENT_MAX_BYTES:,} bytes "
            f"(and a message has at most {settings.JUNE_ATTACHMENTS_PER_MESSAGE})"
        )


def bounded(limit: Callable[[], int]) -> Callable:
    """A view whose multipart body over ``limit()`` bytes is refused (413 JSON) before anything
    reads it: before authentication, whose CSRF check would parse it. The limit is also the
    view's declared largest body (``bodylimit``), which the server enforces before the view."""

    def decorate(view: Callable) -> Callable:
        def refuse(request: HttpRequest) -> HttpResponse | None:
            cap = limit() if request.method == "POST" and is_multipart(request) else None
            if cap is None:
                return None
            try:
                check_declared_size(request, cap)
            except JuneError as exc:
                return JsonResponse(error_body(exc), status=exc.http_status)
            return None

        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def wrapped_async(request: HttpRequest, **kwargs: Any) -> HttpResponse:
                return refuse(request) or await view(request, **kwargs)

            wrapped_async.csrf_exempt = True  # type: ignore[attr-defined]
            return max_body(limit)(wrapped_async)

        @functools.wraps(view)
        def wrapped(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            return refuse(request) or view(request, **kwargs)

        wrapped.csrf_exempt = True  # type: ignore[attr-defined]
        return max_body(limit)(wrapped)

    return decorate


def uploaded_files(request: HttpRequest) -> list[Any]:
    """The files of a multipart body (field ``file``, repeated), at most a message's worth."""
    if not is_multipart(request):
        raise BadRequest("send files as multipart/form-data (field 'file')")
    unknown = sorted(set(request.FILES) - {"file"})
    if unknown:  # the field the API reads named, not only the ones it does not
        named = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise BadRequest(f"files go in the field 'file' (repeat it for several), not {named}")
    found = request.FILES.getlist("file")
    attach.check_count(len(found))
    return found


def turn_form(request: HttpRequest, *, agent: str, key: str, user: Any) -> StartTurn:
    """A multipart ``POST …/turns`` (fields ``text``, ``replace``, files ``file``: ``TurnForm``)
    as the JSON start it stands for: the files uploaded to the session, their ids in
    ``attachments``. The caller discards them (``attachments_discard``) if the start is refused."""
    form = validated(TurnForm, {**request.POST.dict(), "file": request.FILES.getlist("file")})
    found = uploaded_files(request)
    if not found:
        raise BadRequest("a multipart start carries files (field 'file'); send text alone as JSON")
    # 403 for another's, or a key a channel owns (as the start itself); the start creates it
    services.session_to_open(agent=agent, key=key, user=user)
    ids: list[str] = []
    try:
        for f in found:
            ids.append(attach.attachment_upload(agent=agent, key=key, user=user, upload=f).id)
    except BaseException:
        attach.attachments_discard(user=user, ids=ids)  # a refused request leaves nothing
        raise
    return StartTurn(text=form.text, replace=form.replace in ("true", "1"), attachments=ids)
