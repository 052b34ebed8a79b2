"""``POST …/turns``: start a turn, then stream it (SSE), wait for its end (bounded), or answer
202 at once (``?wait=false``).

The 202 of a JSON body is the API's burst path (a client starting many turns at once): the
whole request (authentication, parsing, the start) runs on the request's thread, where the
site's synchronous middleware already runs it (``syncstack``), on one pooled connection: no hop
to the event loop and back. The other forms are an async view, entered from that thread as
Django enters any async view below sync middleware; it authenticates in a hop of its own
(``api.api_view``), and gives its connection back between its queries (``db``)."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from agents_app.runtime import new_turn_id
from agents_app.runtime.seams import SessionRef
from sessions_app import attachment_services, services
from sessions_app.web import admission, links, uploads
from sessions_app.web.api import SSE_HEADERS, api_view, load_turn, turn_response, wants_stream
from sessions_app.web.db import db, released
from sessions_app.web.inputs import read_body, read_query
from sessions_app.web.shapes_common import FALSE_WORDS
from sessions_app.web.shapes_turns import Queued, StartTurn, StartTurnQuery
from sessions_app.web.sse import SessionFollower, event_stream
from sessions_app.web.turn_follow import queued_event

#: ``?wait=`` values that ask for a 202 at once (the query's false words)
NO_WAIT = frozenset(FALSE_WORDS)


@uploads.bounded(attachment_services.max_body_bytes)
def turns(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    """Start a turn; stream it (SSE), wait for its end (bounded), or return 202 at once. A JSON
    body may name uploaded ``attachments``; a multipart one carries its files (``uploads``).
    On the request's thread: a 202 at once stays on it; the other forms run on the event loop."""
    if (
        request.GET.get("wait", "").strip().lower() in NO_WAIT
        and not wants_stream(request)
        and not uploads.is_multipart(request)
    ):
        return _turns_queued(request, **kwargs)
    return async_to_sync(_turns)(request, **kwargs)


def _body(body: StartTurn, query: StartTurnQuery) -> tuple[str, list[str], bool]:
    """(text, attachment ids, replace) of a start: the rules of each (length, ids) are the services'."""
    ids = attachment_services.parse_ids(body.attachments)
    text = body.text if body.text is not None or not ids else ""
    text = "" if ids and not text.strip() else services.validate_text(text)
    return text, ids, body.replace or query.replace


def _queued(turn_id: str, status: str, agent: str, session: str) -> JsonResponse:
    queued: Queued = {"turn_id": turn_id, "status": status}
    return JsonResponse(queued, status=202, headers={"Location": links.turn_api(agent, session, turn_id)})


@released
@api_view("POST")
def _turns_queued(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """A JSON start answered 202 at once: the whole request on this thread."""
    text, ids, replace = _body(read_body(request, StartTurn), read_query(request, StartTurnQuery))
    turn_id = new_turn_id()
    status = _start_queued(
        agent=agent, key=session, text=text, user=user, replace=replace, turn_id=turn_id, attachments=ids
    )
    return _queued(turn_id, status, agent, session)


@api_view("POST")
async def _turns(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    query = read_query(request, StartTurnQuery)
    if not uploads.is_multipart(request):
        return await _start(request, user, agent, session, read_body(request, StartTurn), query)
    body = await db(uploads.turn_form)(request, agent=agent, key=session, user=user)
    try:
        return await _start(request, user, agent, session, body, query)
    except BaseException:  # refused (409, 429, 413, 503…): its uploads go; a started turn keeps them
        await db(attachment_services.attachments_discard)(user=user, ids=body.attachments)
        raise


async def _start(
    request: HttpRequest, user: Any, agent: str, session: str, body: StartTurn, query: StartTurnQuery
) -> HttpResponse:
    text, ids, replace = _body(body, query)
    turn_id = new_turn_id()
    if not query.wait and not wants_stream(request):  # one hop to the database's thread, not three
        status = await db(_start_queued)(
            agent=agent, key=session, text=text, user=user, replace=replace, turn_id=turn_id, attachments=ids
        )
        return _queued(turn_id, status, agent, session)
    # the session is created with the turn (``turn_start``), so a refused start creates nothing;
    # a session that does not exist yet has logged nothing: its events start after 0
    row = await db(services.session_for_user)(agent=agent, key=session, user=user)
    ref = SessionRef(agent, session)

    async def start() -> None:
        await db(admission.start_turn)(
            agent=agent,
            key=session,
            text=text,
            user=user,
            source="http",
            replace=replace,
            turn_id=turn_id,
            attachments=ids,
        )

    # subscribe before the turn exists, so not even its first delta is missed
    follower = SessionFollower(ref, after=row.event_seq if row is not None else 0, turn_id=turn_id)
    await follower.__aenter__()
    try:
        await start()
    except BaseException:
        await follower.close()
        raise
    if wants_stream(request):
        # the turn is durably queued: the stream says so at once, before any worker takes it
        stream = event_stream(
            follower, until_terminal=True, max_seconds=settings.JUNE_API_STREAM_SECONDS, first=[queued_event(turn_id)]
        )
        return StreamingHttpResponse(
            stream, content_type="text/event-stream", headers={**SSE_HEADERS, "X-June-Turn-Id": turn_id}
        )
    deadline = time.monotonic() + settings.JUNE_API_WAIT_SECONDS
    try:
        async for item in follower.items():
            if item.terminal or time.monotonic() >= deadline:
                break
    finally:
        await follower.close()
    turn = await db(load_turn)(turn_id)
    return turn_response(turn, request, agent=agent, key=session)


def _start_queued(
    *, agent: str, key: str, text: str, user: Any, replace: bool, turn_id: str, attachments: list[str]
) -> str:
    """``POST turns?wait=false``'s database work: the turn (and its session, created for
    ``user``: ``turn_start``), and its status as created."""
    record = admission.start_turn(
        agent=agent,
        key=key,
        text=text,
        user=user,
        source="http",
        replace=replace,
        turn_id=turn_id,
        attachments=attachments,
    )
    return str(record.status)  # as committed: no worker can have claimed it before the enqueue
