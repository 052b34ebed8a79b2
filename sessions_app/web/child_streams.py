"""Child turns in their parent's stream (subagents, docs/subagents.md): the websocket of a
session follows every child its turns spawned — and theirs — and forwards the children's events
wrapped with a reference to the child, live and from the log:

- ``{"type": "child.event", "child": {turn_id, agent, session, parent_turn, call_id, index,
  goal}, "event": {seq, type, …}}`` — a committed event of the child's turn; ``seq`` is the
  child session's (a client keeps the last one per child and drops repeats);
- ``{"type": "child.delta", "child": {…}, "event": {type, turn_id, text, offset, base}}`` — live
  text of the child's turn (as the session's own deltas).

A child is followed when its ``child.started`` is sent (replay or live) and, on connect, for
every child the live generation started (a reconnect after ``seq`` still sees running
children); its log is replayed from the start, then its group forwards it live. The reads are
the session's own; the child's reference comes from the parent's log, written by the engine.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from agents_app.runtime.seams import SessionRef
from sessions_app import selectors
from sessions_app.outbox import follows
from sessions_app.outbox.sink import group_name

ENDED = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})


class ChildLogs:
    """The HTTP API's SSE (``sse.SessionFollower``): the same ``child.event`` frames, read from
    each followed child's log when the parent's log is read and on every poll (no ``id:``
    line: the ids are the parent's; child text deltas are the websocket's only)."""

    def __init__(self) -> None:
        self.children: dict[str, dict[str, Any]] = {}

    def found(self, event: dict[str, Any]) -> None:
        if event.get("type") == "child.started" and isinstance(event.get("child"), dict):
            ref = {**event["child"], "parent_turn": event.get("turn_id"), "call_id": event.get("call_id")}
            self.children.setdefault(ref.get("turn_id"), {"ref": ref, "last": 0})

    async def read(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for turn_id, child in list(self.children.items()):
            if child.get("ended"):
                continue
            ref = child["ref"]
            batch = await database_sync_to_async(selectors.events_since)(
                agent=ref["agent"], key=ref["session"], after=child["last"]
            )
            for event in batch:
                child["last"] = event["seq"]
                if event.get("turn_id") != turn_id:
                    continue
                out.append({"type": "child.event", "child": ref, "event": event})
                child["ended"] = child.get("ended") or event.get("type") in ENDED
                self.found(event)  # a grandchild
        return out


class ChildRelay:
    """Mixed into the session consumer (which has ``send_json``, ``channel_layer``,
    ``channel_name``, ``agent``, ``key``)."""

    def _relay_init(self) -> None:
        self.children: dict[str, dict[str, Any]] = {}  # child turn id -> {"ref", "last_seq", "group"}
        self.child_groups: dict[str, set[str]] = {}  # group -> child turn ids followed through it

    async def _follow_existing(self) -> None:
        for ref in await database_sync_to_async(selectors.children_started)(agent=self.agent, key=self.key):
            await self._follow(ref)

    async def _follow(self, ref: dict[str, Any]) -> None:
        turn_id = ref.get("turn_id")
        if not isinstance(turn_id, str) or turn_id in self.children:
            return
        group = group_name(SessionRef(ref["agent"], ref["session"]))
        self.children[turn_id] = {"ref": ref, "last_seq": 0, "group": group}
        if group not in self.child_groups:
            self.child_groups[group] = set()
            await follows.join(self.channel_layer, group, self.channel_name)  # before its replay: no gap
        self.child_groups[group].add(turn_id)
        await self._child_log(turn_id)

    async def _child_log(self, turn_id: str) -> None:
        child = self.children[turn_id]
        ref = child["ref"]
        while True:
            batch = await database_sync_to_async(selectors.events_since)(
                agent=ref["agent"], key=ref["session"], after=child["last_seq"]
            )
            for event in batch:
                await self._child_event(turn_id, event)
                child["last_seq"] = max(child["last_seq"], event["seq"])
            if len(batch) < selectors.EVENT_BATCH:
                return

    async def _child_event(self, turn_id: str, event: dict[str, Any]) -> None:
        if event.get("turn_id") != turn_id:
            return  # another turn of a session the tool named (``key=``): not this child's
        child = self.children[turn_id]
        await self.send_json({"type": "child.event", "child": child["ref"], "event": event})
        if event.get("type") in ENDED:
            child["ended"] = True
        if event.get("type") == "child.started" and isinstance(event.get("child"), dict):
            await self._follow({**event["child"], "parent_turn": turn_id, "call_id": event.get("call_id")})

    async def _relayed(self, message: dict[str, Any]) -> bool:
        """A layer message from a followed child's group: forward it (True), else False."""
        followed = self.child_groups.get(message.get("group") or "")
        if not followed:
            return False
        if message.get("type") == "june.delta":
            event = message.get("event") or {}
            if event.get("turn_id") in followed:
                await self.send_json(
                    {"type": "child.delta", "child": self.children[event["turn_id"]]["ref"], "event": event}
                )
            return True
        for event in message.get("events") or ():
            turn_id = event.get("turn_id")
            if turn_id not in followed or not isinstance(event.get("seq"), int):
                continue
            child = self.children[turn_id]
            if event["seq"] <= child["last_seq"]:
                continue
            if event["seq"] > child["last_seq"] + 1:
                await self._child_log(turn_id)  # fill a skip from the log
                continue
            await self._child_event(turn_id, event)
            child["last_seq"] = event["seq"]
        return True

    async def _children_catchup(self) -> None:
        for turn_id, child in list(self.children.items()):
            if not child.get("ended"):
                await self._child_log(turn_id)

    async def _relay_close(self) -> None:
        for group in self.child_groups:
            await self.channel_layer.group_discard(group, self.channel_name)
