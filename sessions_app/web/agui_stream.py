"""June as an AG-UI agent (``POST …/api/agents/<agent>/agui``; the guide: docs/frontends.md).

``RunAgentInput`` in (validated by ``ag_ui.core.RunAgentInput``), AG-UI events out over SSE
(``agui_events``). ``threadId`` is the June session key. What a run does:

- with ``resume`` entries: each answers one interrupt (a question the turn is parked on) through
  June's answer path (``services.turn_resume``: same policy, 403/409/422 before any stream); a
  ``resolved`` entry's ``payload`` is June's answer (a tool approval's ``{"decision": …}``), a
  ``cancelled`` one rejects a tool approval; the run follows the turn from there;
- else, the last message a user's: a turn with its text;
- else (no new user message: a client reattaching after a reload): the thread's unsettled turn,
  replayed from the event log, then live; 409 when none.

Bearer token or session login, as the whole API."""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from pydantic import ValidationError

from agents_app.runtime import new_turn_id
from agents_app.runtime.errors import TurnNotResumable
from agents_app.runtime.seams import SessionRef, TurnStatus
from sessions_app import selectors, services
from sessions_app.site_errors import BadRequest
from sessions_app.web import admission
from sessions_app.web.agui_events import AguiRun, encode
from sessions_app.web.api import SSE_HEADERS, api_view
from sessions_app.web.db import db
from sessions_app.web.inputs import read_json, validated
from sessions_app.web.shapes_frontends import AguiRunInput
from sessions_app.web.sse import SessionFollower
from sessions_app.web.turn_follow import folded, replay_after, replies_before, turn_events, unsettled_turn

REJECTED = {"decision": "reject", "message": "cancelled by the person"}


def _parse(request: HttpRequest) -> RunAgentInput:
    body = read_json(request)
    validated(AguiRunInput, body)  # the outline (keys, types); the protocol's own model reads the rest
    try:
        run = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise BadRequest(f"not an AG-UI RunAgentInput: {where}: {first.get('msg')}"[:300]) from None
    services.validate_session_key(run.thread_id)
    return run


def _user_text(run: RunAgentInput) -> str | None:
    """The text of the last message if it is a user's (text content parts joined), else None."""
    if not run.messages:
        return None
    last = run.messages[-1].root if hasattr(run.messages[-1], "root") else run.messages[-1]
    if getattr(last, "role", None) != "user":
        return None
    content = last.content
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest("a user message's content must be text or a list of content parts")
    return "\n".join(str(getattr(part, "text", "")) for part in content if getattr(part, "type", None) == "text")


def _answer(*, agent: str, key: str, user: Any, run: RunAgentInput, remote: str) -> tuple[str, int | None]:
    """Answer the parked turn's interrupts: its id, and where to replay it from if it still
    waits (a step's other questions), else None."""
    session = services.session_for_user(agent=agent, key=key, user=user)
    turn = unsettled_turn(session) if session is not None else None
    if turn is None or turn.status != TurnStatus.SUSPENDED:
        raise TurnNotResumable("nothing in this thread waits for an answer")
    for entry in run.resume or ():
        answer = entry.payload
        if entry.status == "cancelled":
            if not entry.interrupt_id.startswith("approve:"):
                raise BadRequest("only a tool approval can be cancelled here; answer the question")
            answer = REJECTED
        services.turn_resume(
            turn_id=turn.pk,
            input_id=entry.interrupt_id,
            answer=answer,  # JSON already checked by read_json (safejson)
            user=user,
            agent=agent,
            key=key,
            via="api",
            remote_addr=remote,
        )
    now = selectors.turn_with_session(turn.pk)
    waits = now is not None and now.status == TurnStatus.SUSPENDED
    return str(turn.pk), replay_after(session, turn) if waits and session is not None else None


def _start(*, agent: str, key: str, user: Any, text: str, turn_id: str) -> None:
    admission.start_turn(
        agent=agent, key=key, text=services.validate_text(text), user=user, source="http", turn_id=turn_id
    )


def _reattach(*, agent: str, key: str, user: Any) -> tuple[str, int]:
    session = services.session_for_user(agent=agent, key=key, user=user)
    turn = unsettled_turn(session) if session is not None else None
    if turn is None or session is None:
        raise TurnNotResumable("no run of this thread is under way: send a user message")
    return str(turn.pk), replay_after(session, turn)


def _state(*, agent: str, key: str, user: Any, turn_id: str) -> dict[str, Any]:
    session = services.session_for_user(agent=agent, key=key, user=user)
    return {"june": {"agent": agent, "session": key, "turnId": turn_id, "branch": session.generation if session else 0}}


def _after(*, agent: str, key: str, user: Any) -> int:
    row = services.session_for_user(agent=agent, key=key, user=user)
    return row.event_seq if row is not None else 0


@api_view("POST")
async def agui_run(request: HttpRequest, user: Any, agent: str) -> HttpResponse:
    run = _parse(request)
    key = run.thread_id
    ref = SessionRef(agent, key)
    after = await db(_after)(agent=agent, key=key, user=user)
    follower: SessionFollower | None = None
    if run.resume:
        remote = str(request.META.get("REMOTE_ADDR") or "")[:64]
        turn_id, replay = await db(_answer)(agent=agent, key=key, user=user, run=run, remote=remote)
        after = replay if replay is not None else after  # still parked: the run ends on its questions again
    elif (text := _user_text(run)) is not None:
        turn_id = new_turn_id()
        follower = await SessionFollower(ref, after=after, turn_id=turn_id).__aenter__()
        try:
            await db(_start)(agent=agent, key=key, user=user, text=text, turn_id=turn_id)
        except BaseException:
            await follower.close()
            raise
    else:
        turn_id, after = await db(_reattach)(agent=agent, key=key, user=user)
    state = await db(_state)(agent=agent, key=key, user=user, turn_id=turn_id)
    before = await db(replies_before)(agent=agent, key=key, turn_id=turn_id, after=after) if run.resume else 0
    fold = AguiRun(thread_id=key, run_id=run.run_id, turn_id=turn_id, state=state, messages_before=before)
    events = turn_events(ref, turn_id=turn_id, after=after, user=user, follower=follower, queued=follower is not None)
    return StreamingHttpResponse(
        folded(events, fold, encode),
        content_type="text/event-stream",
        headers={**SSE_HEADERS, "X-June-Turn-Id": turn_id},
    )
