"""The AI SDK's chat transport, served by June (routes: ``api_urls``; the guide: docs/frontends.md).

A ``useChat`` front end points ``DefaultChatTransport({ api })`` at ``…/api/agents/<agent>/chat``;
the chat id is the June session key. ``POST`` takes the hook's body (``id``, ``messages``,
``trigger``, ``messageId``) and answers with the UI message stream (``uimessage_chunks``) of the
turn it started, continued or regenerated:

- the last message a person's (``submit-message``): a turn with its text and files;
- the last message the assistant's, with tool parts in ``approval-responded``: each answer goes
  through June's answer path (``services.turn_resume``: the same policy, 403/409/422 before any
  stream), and the stream continues the parked turn;
- ``regenerate-message``: June's regenerate (a new branch from the turn ``messageId`` names).

``GET …/chat/<id>/stream`` is the hook's resume request: the session's unsettled turn replayed
from the durable event log (the transport's ``resumeStreamIsReplay``), then live; 204 when
none. ``POST …/chat/<id>/cancel`` is stop (the hook's ``stop()`` only aborts its fetch, which a
reload does too: cancelling is said out loud). ``GET …/chat/<id>/messages`` is the history as
UI messages (``uimessage_history``). Bearer token or session login, as the whole API."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, AsyncGenerator

from django.core.files.base import ContentFile
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from agents_app.runtime import new_turn_id
from agents_app.runtime.errors import NotFound, TurnNotResumable
from agents_app.runtime.seams import SessionRef
from sessions_app import attachment_services, selectors, services
from sessions_app import models as m
from sessions_app.site_errors import BadRequest
from sessions_app.web import admission
from sessions_app.web.api import SSE_HEADERS, TURN_ID_RE, api_view, turn_json
from sessions_app.web.db import db
from sessions_app.web.inputs import read_body
from sessions_app.web.shapes_frontends import Chat, UIMessages
from sessions_app.web.shapes_turns import Nothing
from sessions_app.web.sse import SessionFollower
from sessions_app.web.turn_follow import folded, replay_after, turn_events, unsettled_turn
from sessions_app.web.uimessage_chunks import DONE, PROTOCOL_HEADER, UIChunks, sse
from sessions_app.web.uimessage_history import ui_messages

DATA_URL_RE = re.compile(r"data:([\w.+/-]{1,100})(;[\w=.-]{1,50})*;base64,")
#: a tool part's type: ``tool-<name>`` (static) or ``dynamic-tool``
TOOL_PART_RE = re.compile(r"tool-.+|dynamic-tool")
DENIED = "denied in the chat"


# -- the body ----------------------------------------------------------------------------------------


def _parse(body: Chat) -> tuple[str, str, dict[str, Any], str | None]:
    """(chat id, trigger, last message, messageId) of the hook's body; BadRequest otherwise."""
    services.validate_session_key(body.id)
    last = body.messages[-1]
    if last.get("role") not in ("user", "assistant") or not isinstance(last.get("parts"), list):
        raise BadRequest("the last message must be a user's or the assistant's, with parts")
    return body.id, body.trigger, last, body.messageId


def _user_input(message: dict[str, Any]) -> tuple[str, list[tuple[str, bytes]]]:
    """The text and the files (name, bytes) of a person's UI message."""
    texts, files = [], []
    for part in message["parts"]:
        if not isinstance(part, dict):
            raise BadRequest("each part must be an object")
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "file":
            url = part.get("url")
            head = DATA_URL_RE.match(url) if isinstance(url, str) else None
            if head is None:
                raise BadRequest("a file part's url must be a base64 data: URL")
            try:
                data = base64.b64decode(url[head.end() :], validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("a file part's data: URL is not valid base64") from None
            files.append((str(part.get("filename") or "upload")[:200], data))
    attachment_services.check_count(len(files))
    return "\n".join(texts), files


def _approvals(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(input id, June's answer) for each tool part the person has just approved or denied."""
    out = []
    for part in message["parts"]:
        if not isinstance(part, dict) or not TOOL_PART_RE.fullmatch(str(part.get("type"))):
            continue
        approval = part.get("approval")
        if part.get("state") != "approval-responded" or not isinstance(approval, dict):
            continue
        if not isinstance(approval.get("id"), str) or not isinstance(approval.get("approved"), bool):
            raise BadRequest("an approval response needs an id and approved (true or false)")
        if approval["approved"]:
            out.append((approval["id"], {"decision": "approve"}))
        else:
            reason = approval.get("reason")
            out.append((approval["id"], {"decision": "reject", "message": str(reason or DENIED)[:2000]}))
    return out


# -- what a POST does, on the database's thread ----------------------------------------------------


def _start(*, agent: str, key: str, user: Any, last: dict[str, Any], turn_id: str) -> None:
    text, files = _user_input(last)
    if files:  # as an upload: the user's session or a key they may create (the start creates it)
        services.session_to_open(agent=agent, key=key, user=user)
    ids: list[str] = []
    try:
        for name, data in files:
            upload = ContentFile(data, name=name)
            ids.append(str(attachment_services.attachment_upload(agent=agent, key=key, user=user, upload=upload).id))
        text = text if ids else services.validate_text(text)
        admission.start_turn(
            agent=agent, key=key, text=text, user=user, source="http", turn_id=turn_id, attachments=ids
        )
    except BaseException:  # a refused start (429, 409, 413…) leaves none of its files
        attachment_services.attachments_discard(user=user, ids=ids)
        raise


def _parked_turn(*, agent: str, key: str, user: Any) -> str:
    """The chat's turn parked on a question; 409 when nothing in the session waits."""
    session = services.session_for_user(agent=agent, key=key, user=user)
    turn = unsettled_turn(session) if session is not None else None
    if turn is None or turn.status != m.TurnStatus.SUSPENDED:
        raise TurnNotResumable("nothing in this chat waits for an answer")
    return str(turn.pk)


def _answer(
    *, agent: str, key: str, user: Any, turn_id: str, answers: list[tuple[str, dict[str, Any]]], remote: str
) -> bool:
    """Answer the parked turn's approvals (``turn_resume``: 403/409/422 as every answer);
    whether it still waits (a step's other calls not answered yet)."""
    for input_id, answer in answers:
        services.turn_resume(
            turn_id=turn_id,
            input_id=input_id,
            answer=answer,
            user=user,
            agent=agent,
            key=key,
            via="api",
            remote_addr=remote,
        )
    now = selectors.turn_with_session(turn_id)
    return now is not None and now.status == m.TurnStatus.SUSPENDED


def _regenerate(*, agent: str, key: str, user: Any, message_id: str | None) -> str:
    session = services.session_for_user(agent=agent, key=key, user=user)
    if session is None:
        raise NotFound(f"no chat {key!r}")
    turn_id = message_id if message_id and TURN_ID_RE.fullmatch(message_id) else None
    if turn_id is None or selectors.turn_in_session(session, turn_id) is None:
        last = selectors.last_turn(session)
        if last is None:
            raise NotFound("this chat has no reply to regenerate")
        turn_id = str(last.pk)
    return services.turn_regenerate(agent=agent, key=key, turn_id=turn_id, user=user, source="http").turn_id


def _event_seq(*, agent: str, key: str, user: Any) -> int:
    row = services.session_for_user(agent=agent, key=key, user=user)
    return row.event_seq if row is not None else 0


# -- the views -----------------------------------------------------------------------------------------


@api_view("POST")
async def chat(request: HttpRequest, user: Any, agent: str) -> HttpResponse:
    """The hook's POST: start, continue (approvals) or regenerate; the UI message stream."""
    chat_id, trigger, last, message_id = _parse(read_body(request, Chat))
    after = await db(_event_seq)(agent=agent, key=chat_id, user=user)
    ref = SessionRef(agent, chat_id)
    if trigger == "regenerate-message":
        turn_id = await db(_regenerate)(agent=agent, key=chat_id, user=user, message_id=message_id)
        return _response(ref, turn_id=turn_id, after=after, user=user, queued=True)
    answers = _approvals(last) if last["role"] == "assistant" else []
    if last["role"] == "assistant":
        if not answers:
            raise BadRequest("the last message is the assistant's, with no approval response to send")
        remote = str(request.META.get("REMOTE_ADDR") or "")[:64]
        parked = await db(_parked_turn)(agent=agent, key=chat_id, user=user)
        # subscribed before the answer, so the continued turn's first deltas are not missed
        follower = await SessionFollower(ref, after=after, turn_id=parked).__aenter__()
        try:
            waits = await db(_answer)(
                agent=agent, key=chat_id, user=user, turn_id=parked, answers=answers, remote=remote
            )
        except BaseException:
            await follower.close()
            raise
        if waits:  # the rest of the step's approvals are still to answer: nothing runs yet
            await follower.close()
            return _response(ref, turn_id=parked, after=after, user=user, events=_still_parked(parked))
        return _response(ref, turn_id=parked, after=after, user=user, follower=follower)
    turn_id = new_turn_id()
    # subscribe before the turn exists, so not even its first delta is missed
    follower = await SessionFollower(ref, after=after, turn_id=turn_id).__aenter__()
    try:
        await db(_start)(agent=agent, key=chat_id, user=user, last=last, turn_id=turn_id)
    except BaseException:
        await follower.close()
        raise
    return _response(ref, turn_id=turn_id, after=after, user=user, follower=follower, queued=True)


@api_view("GET")
async def chat_stream(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """The hook's resume request: the unsettled turn, replayed from its start; 204 when none."""
    found = await db(_unsettled)(agent=agent, key=session, user=user)
    if found is None:
        return HttpResponse(status=204)
    turn_id, after = found
    return _response(SessionRef(agent, session), turn_id=turn_id, after=after, user=user)


def _unsettled(*, agent: str, key: str, user: Any) -> tuple[str, int] | None:
    row = services.session_for_user(agent=agent, key=key, user=user)
    turn = unsettled_turn(row) if row is not None else None
    return (str(turn.pk), replay_after(row, turn)) if turn is not None and row is not None else None


@api_view("POST")
def chat_cancel(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """Stop: cancel the chat's unsettled turn (200 with it); 204 when there is none. The rule is
    every cancel's (``rules.check_cancellable``): a turn parked on a question is a 409 (answer it,
    or reset), one parked on its subagents is cancelled with them."""
    read_body(request, Nothing)
    row = services.session_for_user(agent=agent, key=session, user=user)
    turn = unsettled_turn(row) if row is not None else None
    if turn is None:
        return HttpResponse(status=204)
    services.turn_cancel(turn_id=turn.pk, agent=agent, key=session, user=user)
    turn = selectors.turn_with_session(turn.pk) or turn
    return JsonResponse(turn_json(turn))


@api_view("GET")
def chat_messages(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """The live branch as UI messages (a chat not started yet: none)."""
    row = services.session_for_user(agent=agent, key=session, user=user)
    history: UIMessages = {"messages": ui_messages(row) if row is not None else []}
    return JsonResponse(history)


async def _still_parked(turn_id: str) -> AsyncGenerator[dict[str, Any] | None, None]:
    yield {"type": "turn.parked", "turn_id": turn_id}


def _response(
    ref: SessionRef,
    *,
    turn_id: str,
    after: int,
    user: Any,
    follower: SessionFollower | None = None,
    events: AsyncGenerator[dict[str, Any] | None, None] | None = None,
    queued: bool = False,
) -> StreamingHttpResponse:
    events = events or turn_events(ref, turn_id=turn_id, after=after, user=user, follower=follower, queued=queued)
    fold = UIChunks(turn_id)
    return StreamingHttpResponse(
        folded(events, fold, sse, end=lambda: [DONE] if fold.finished else []),
        content_type="text/event-stream",
        headers={**SSE_HEADERS, PROTOCOL_HEADER[0]: PROTOCOL_HEADER[1], "X-June-Turn-Id": turn_id},
    )
