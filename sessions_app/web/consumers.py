"""The chat websocket: ``/ws/agents/<agent>/sessions/<session>/?after=<seq>``.

Contract:
- only a logged-in user (close 4401), the session's owner (4403), a known agent (4404), a valid
  key and ``after`` (4400); the origin is checked before this consumer (asgi.py). Opening the
  socket of a session that does not exist yet creates it, owned by the user, so nobody can
  listen on a key before its owner uses it.
- committed events exactly once, in ``seq`` order: the consumer joins the session's group
  FIRST, then replays the log after ``after``, then forwards live events, dropping those it
  already sent and re-reading the log when one skips ahead (the layer is at-most-once; the log
  is the truth). A periodic check re-reads the log too, so a lost last event still arrives.
- deltas are forwarded live (no ``seq``; see ``sink.py`` for ``offset``/``base``).
- at most ``JUNE_WS_MAX_PER_USER`` chat sockets per user (close 4429: too many), counted across
  the web processes in Redis when the channel layer is Redis's, else per process
  (``socketcount``).
- the login is checked again before every client frame (``socketauth``): a login that ended (a
  logout, the session deleted, the account deactivated, the password changed) gets an error
  frame (status 401) and the socket closes with 4401; a logout or a deactivation closes the
  user's sockets at once, without waiting for a frame.
- the operator who took the session over (``takeover``) may open it too, and write with
  ``{"type": "say", "text"}``; while it is taken over its owner's ``start`` gives the text to
  that person (ack ``{"status": "taken_over", "turn_id": null, "seq"}``) and starts nothing.
- client frames ``{"type": "start"|"cancel"|"resume"|"reset"|"say", …, "id"?}`` each go to one
  handler calling a service; the reply is ``{"type": "ack", "for": <type>, "id", …}`` or
  ``{"type": "error", "code", "message", "status", "id"}`` (a start refused by a rate limit or
  quota: status 429, code ``rate_limited``, and ``retry_after`` in seconds). After an error frame
  the socket stays open and usable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from agents_app.runtime.errors import JuneError, NotFound
from agents_app.runtime.seams import SessionRef, TurnStatus
from sessions_app import attachment_services, listings, safejson, selectors, services, takeover
from sessions_app.outbox import follows
from sessions_app.outbox.sink import group_name
from sessions_app.site_errors import AccessDenied, BadRequest, PayloadTooLarge, RateLimited
from sessions_app.web import admission, socketauth, socketcount
from sessions_app.web.child_streams import ChildRelay
from sessions_app.web.sse import parse_seq

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024
CATCHUP_SECONDS = 5.0

LIVE_TYPES = frozenset({"june.events", "june.delta"})

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY = 4429


class SessionConsumer(ChildRelay, AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self._relay_init()
        self.last_seq = 0
        self.group = self.user_group = ""
        self.counted: Any = None
        self.sending = asyncio.Lock()  # replay, live events and the periodic check take turns
        self.catchup: asyncio.Task | None = None
        kwargs = self.scope["url_route"]["kwargs"]
        self.agent, self.key = kwargs["agent"], kwargs["session"]
        self.user = self.scope.get("user")
        if self.user is None or not self.user.is_authenticated:
            return await self._refuse(CLOSE_UNAUTHENTICATED, "log in first")
        try:
            after = _parse_after(self.scope.get("query_string", b""))
            # opening creates nothing: the first message does (``turn_start``)
            await database_sync_to_async(services.session_to_open)(agent=self.agent, key=self.key, user=self.user)
        except NotFound as exc:
            return await self._refuse(CLOSE_NOT_FOUND, str(exc))
        except AccessDenied as exc:
            # the operator who took the session over follows it too (docs/operations.md "Takeover")
            if not await database_sync_to_async(takeover.holds)(agent=self.agent, key=self.key, user=self.user):
                return await self._refuse(CLOSE_FORBIDDEN, str(exc))
        except BadRequest as exc:
            return await self._refuse(CLOSE_BAD_REQUEST, str(exc))
        cap = settings.JUNE_WS_MAX_PER_USER
        if cap:  # across the web processes with Redis (``socketcount``)
            place = socketcount.Place(self.user.pk, self.channel_name)
            if not await place.take(cap):
                return await self._refuse(CLOSE_TOO_MANY, f"too many open chat sockets: at most {cap}; close some")
            self.counted = place
        self.login = getattr(self.scope.get("session"), "session_key", None)
        self.group = group_name(SessionRef(self.agent, self.key))
        await follows.join(self.channel_layer, self.group, self.channel_name)  # before the replay: no gap
        self.user_group = socketauth.user_group(self.user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)  # a logout closes it
        await self.accept()
        self.last_seq = after
        async with self.sending:
            await self._send_log()
            await self._follow_existing()  # children started before ``after`` (a reconnect)
        queued = await database_sync_to_async(listings.queued_turns)(agent=self.agent, key=self.key)
        await self.send_json({"type": "ready", "last_seq": self.last_seq, "queued": queued})
        self.catchup = asyncio.ensure_future(self._catchup_forever())

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes old DB connections before every handler through sync_to_async: one
        # hop through the process's single sync thread per message, shared by every socket,
        # which caps a daphne at ~100 layer messages/s under load. The live handlers touch the
        # database only through database_sync_to_async (which cleans up itself): skip it.
        if message.get("type") in LIVE_TYPES:
            await getattr(self, get_handler_name(message))(message)
        else:
            await super().dispatch(message)

    async def disconnect(self, code: int) -> None:
        if self.counted is not None:
            place, self.counted = self.counted, None
            await place.give_back()
        if self.catchup is not None:
            self.catchup.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.user_group:
            await self.channel_layer.group_discard(self.user_group, self.channel_name)
        await self._relay_close()

    async def _refuse(self, code: int, message: str) -> None:
        # accept, then close with a code: a browser sees the code (a refused handshake is 1006)
        await self.accept()
        await self.send_json({"type": "error", "code": "refused", "status": code - 4000, "message": message})
        await self.close(code=code)

    async def june_login_check(self, message: dict[str, Any]) -> None:
        """The user logged out somewhere, or was deactivated: close if it was this login."""
        if message.get("ended") == self.login or not await self._login_valid():
            await self._logged_out()

    async def _login_valid(self) -> bool:
        return await database_sync_to_async(socketauth.login_valid)(self.login, self.user.pk)

    async def _logged_out(self) -> None:
        await self.send_json({"type": "error", "code": "unauthenticated", "status": 401, "message": "log in again"})
        await self.close(code=CLOSE_UNAUTHENTICATED)

    # -- events out ----------------------------------------------------------------------------------

    async def june_events(self, message: dict[str, Any]) -> None:
        """Committed events from the layer: drop what was sent, fill a skip from the log."""
        async with self.sending:
            if await self._relayed(message):
                return
            if message.get("again"):
                # a worker's last batch, sent again to a follower it heard late (``follows``): a
                # doorbell. Its events may be of an earlier session of this name (one deleted,
                # then made anew): only the log says what this session holds
                await self._send_log()
                return
            for event in message.get("events") or ():
                seq = event.get("seq")
                if not isinstance(seq, int) or seq <= self.last_seq:
                    continue
                if seq > self.last_seq + 1:
                    # the log holds every committed event up to this one: an event it does not
                    # hold is no event of this session, and is not sent (its seq would hide the
                    # session's own events up to it)
                    await self._send_log()
                    continue
                await self.send_json(event)
                self.last_seq = seq
                if event.get("type") == "child.started":
                    await self._follow(
                        {**event.get("child", {}), "parent_turn": event.get("turn_id"), "call_id": event.get("call_id")}
                    )

    async def june_queued(self, message: dict[str, Any]) -> None:
        """Another tab of this session queued a turn (the doorbell only: a socket that misses it
        gets the session's queued turns with its next ``ready`` frame)."""
        if message.get("sender") != self.channel_name and isinstance(message.get("turn"), dict):
            await self.send_json({"type": "queued", "queued": [message["turn"]]})

    async def june_delta(self, message: dict[str, Any]) -> None:
        if self.child_groups and await self._relayed(message):
            return
        event = message.get("event")
        if isinstance(event, dict):
            await self.send_json(event)

    async def _send_log(self) -> None:
        while True:
            batch = await database_sync_to_async(selectors.events_since)(
                agent=self.agent, key=self.key, after=self.last_seq
            )
            for event in batch:
                await self.send_json(event)
                self.last_seq = event["seq"]
                if event.get("type") == "child.started":
                    await self._follow(
                        {**event.get("child", {}), "parent_turn": event.get("turn_id"), "call_id": event.get("call_id")}
                    )
            if len(batch) < selectors.EVENT_BATCH:
                return

    async def _catchup_forever(self) -> None:
        """A lost doorbell must not hide the last events of a turn: look at the log now and then."""
        while True:
            await asyncio.sleep(CATCHUP_SECONDS)
            try:
                if self.counted is not None:
                    await self.counted.renew()  # its place among the user's sockets does not lapse
                last = await database_sync_to_async(selectors.session_last_seq)(agent=self.agent, key=self.key)
                if last > self.last_seq:
                    async with self.sending:
                        await self._send_log()
                if self.children:
                    async with self.sending:
                        await self._children_catchup()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("websocket catch-up of %s/%s failed", self.agent, self.key)

    # -- frames in -------------------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        frame: Any = None
        try:
            if text_data is None:
                raise BadRequest("frames are JSON text")
            # surrogatepass: a lone surrogate (no real server delivers one) is refused by the parser
            if len(text_data) > MAX_FRAME_BYTES or len(text_data.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES:
                raise PayloadTooLarge(f"a frame is at most {MAX_FRAME_BYTES} bytes")
            frame = safejson.loads(text_data, what="the frame")
            if not isinstance(frame, dict):
                raise BadRequest("a frame is a JSON object")
            kind = frame.get("type")
            if not isinstance(kind, str):
                raise BadRequest(f"a frame's type is a string, one of {sorted(FRAME_HANDLERS)}")
            handler = FRAME_HANDLERS.get(kind)
            if handler is None:
                raise BadRequest(f"unknown frame type {kind[:40]!r}; expected one of {sorted(FRAME_HANDLERS)}")
            if not await self._login_valid():  # every frame acts as the user: is it still them?
                return await self._logged_out()
            reply = await handler(self, frame)
            await self.send_json({"type": "ack", "for": kind, "id": frame.get("id"), **reply})
        except RateLimited as exc:  # with when to retry (the API's Retry-After)
            await self._error(frame, exc.code, str(exc), exc.http_status, retry_after=exc.retry_after)
        except JuneError as exc:
            await self._error(frame, exc.code, str(exc) or exc.code, exc.http_status)
        except Exception:
            log.exception("websocket frame of %s/%s failed", self.agent, self.key)
            await self._error(frame, "internal", "internal error", 500)

    async def _error(self, frame: Any, code: str, message: str, status: int, **extra: Any) -> None:
        ident = frame.get("id") if isinstance(frame, dict) else None
        await self.send_json(
            {"type": "error", "code": code, "message": message, "status": status, "id": ident, **extra}
        )

    async def frame_start(self, frame: dict[str, Any]) -> dict[str, Any]:
        replace = frame.get("replace", False)
        if not isinstance(replace, bool):
            raise BadRequest("replace must be true or false")
        # taken over by a person: the message goes to them, and no turn starts
        said = await database_sync_to_async(takeover.user_says_in)(
            agent=self.agent, key=self.key, user=self.user, text=frame.get("text"), attachments=frame.get("attachments")
        )
        if said is not None:
            return {"turn_id": None, "status": "taken_over", "seq": said}
        # ``attachments``: ids of uploads (``POST …/attachments``), checked as the API checks them
        files = attachment_services.parse_ids(frame.get("attachments", []))
        rec = await database_sync_to_async(admission.start_turn)(
            agent=self.agent,
            key=self.key,
            text=frame.get("text"),
            user=self.user,
            source="web",
            replace=replace,
            attachments=files,
        )
        if rec.status == TurnStatus.QUEUED:  # the session's other tabs show it waiting, as this one does
            queued = {"turn_id": rec.turn_id, "text": rec.input.text, "kind": "inbound", "attachments": len(files)}
            await self.channel_layer.group_send(
                self.group, {"type": "june.queued", "turn": queued, "sender": self.channel_name}
            )
        return {"turn_id": rec.turn_id, "status": str(rec.status)}

    async def frame_cancel(self, frame: dict[str, Any]) -> dict[str, Any]:
        rec = await database_sync_to_async(services.turn_cancel)(
            turn_id=_required_str(frame, "turn_id"), agent=self.agent, key=self.key, user=self.user
        )
        return {"turn_id": rec.turn_id, "status": str(rec.status)}

    async def frame_resume(self, frame: dict[str, Any]) -> dict[str, Any]:
        if "answer" not in frame:
            raise BadRequest("answer is required")
        rec = await database_sync_to_async(services.turn_resume)(
            turn_id=_required_str(frame, "turn_id"),
            input_id=_required_str(frame, "input_id"),
            answer=frame["answer"],
            user=self.user,
            agent=self.agent,
            key=self.key,
            via="web",
            remote_addr=_client_addr(self.scope),
        )
        return {"turn_id": rec.turn_id, "status": str(rec.status)}

    async def frame_say(self, frame: dict[str, Any]) -> dict[str, Any]:
        """The operator holding the takeover writes to the user (403 for anyone else)."""
        seq = await database_sync_to_async(takeover.person_says_in)(
            agent=self.agent, key=self.key, user=self.user, text=frame.get("text")
        )
        return {"seq": seq}

    async def frame_reset(self, frame: dict[str, Any]) -> dict[str, Any]:
        return await database_sync_to_async(services.session_reset)(agent=self.agent, key=self.key, user=self.user)


class NoRouteConsumer(AsyncJsonWebsocketConsumer):
    """Every websocket path no route matches: accepted, told why, closed with 4404 (a browser
    sees the code; a refused handshake would be 1006 and, in daphne, a traceback)."""

    async def connect(self) -> None:
        await self.accept()
        await self.send_json({"type": "error", "code": "refused", "status": 404, "message": "no websocket route here"})
        await self.close(code=CLOSE_NOT_FOUND)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        return None


FRAME_HANDLERS = {
    "start": SessionConsumer.frame_start,
    "cancel": SessionConsumer.frame_cancel,
    "resume": SessionConsumer.frame_resume,
    "reset": SessionConsumer.frame_reset,
    "say": SessionConsumer.frame_say,
}


def _parse_after(query_string: bytes) -> int:
    """``?after=`` through the SSE endpoint's parser: the same digits, bound and message."""
    values = parse_qs(query_string.decode("latin-1")).get("after") or [""]
    try:
        return parse_seq(values[-1], name="?after=") or 0
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _required_str(frame: dict[str, Any], name: str) -> str:
    value = frame.get(name)
    if not isinstance(value, str) or not value or len(value) > 200:
        raise BadRequest(f"{name} is required (a string)")
    return value


def _client_addr(scope: dict[str, Any]) -> str:
    client = scope.get("client") or ("",)
    return str(client[0] or "")[:64]
