"""The tree of turns a turn belongs to (subagents, docs/subagents.md): its root, every child
and grandchild, their status and timing, each a link to its turn page — for the turn page and
the archive (a reset parent's generation lists its children, whose sessions are their own)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agents_app.runtime import short_turn_id, subagents
from sessions_app import generations
from sessions_app import models as m
from sessions_app.times import time_text

from .console import TOKEN_KEYS

#: the events that end a turn: their commit time is when it ended (``Turn.updated_at`` is not
#: stamped by a checkpoint's UPDATE, so it read "0.0s" for a turn that took a second)
KEY_SHOWN = 24  # a child's session key ("sub:<parent>:<step>…") is cut here; its title has it all

FIELDS = (
    "id",
    "parent_id",
    "status",
    "depth",
    "waiting",
    "created_at",
    "updated_at",
    "session__agent",
    "session__key",
    "input",
    "usage",
    "spawn_step",
    "session_id",
    "pending",
)


def root_of(turn: m.Turn) -> m.Turn:
    """Walk up the parent chain (at most ``MAX_DEPTH``-ish hops; a missing parent ends it)."""
    seen = {turn.pk}
    while turn.parent_id and turn.parent_id not in seen:
        parent = m.Turn.objects.select_related("session").filter(pk=turn.parent_id).first()
        if parent is None:
            break
        seen.add(parent.pk)
        turn = parent
    return turn


def descendants(root_id: str, limit: int = 500) -> dict[str | None, list[dict[str, Any]]]:
    """Children by parent id, one query per level."""
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    level = [root_id]
    total = 0
    while level and total < limit:
        rows = list(
            m.Turn.objects.filter(parent_id__in=level)
            .order_by("spawn_step", "created_at")
            .values(*FIELDS)[: limit - total]
        )
        for row in rows:
            by_parent.setdefault(row["parent_id"], []).append(row)
        total += len(rows)
        level = [row["id"] for row in rows]
    return by_parent


def _seconds(row: dict[str, Any]) -> str:
    if row["status"] in ("queued", "running") or row["waiting"]:
        return "…"
    end = row.get("ended_at") or row["updated_at"]
    seconds = max((end - row["created_at"]).total_seconds(), 0.0)
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def _waiting(row: dict[str, Any]) -> str:
    """What a suspended turn that no person answers waits on: its children (subagents), or the
    message batch its model call went in (``batches``: its ledger row, read with the tree)."""
    if not row["waiting"]:
        return ""
    pending = row.get("pending") or {}
    if pending.get("reason") == "batch":
        call = row.get("batch_call")
        if call is None:
            return ", waiting on a message batch"
        if not call["batch_id"]:
            return f", waiting on a message batch (request written {time_text(_at(call['created_at']))}, not sent yet)"
        since = time_text(_at(call["submitted_at"] or call["created_at"]))
        return f", waiting on message batch {call['batch_id']} (sent {since}, {call['status']})"
    n = row["waiting"]
    return f", waiting on {n} subagent{'s' if n != 1 else ''}"


def _at(epoch: float | None) -> Any:
    return None if epoch is None else dt.datetime.fromtimestamp(epoch, dt.UTC)


def with_batch_calls(rows: list[dict[str, Any]]) -> None:
    """Each batch-parked row gets its ledger row (``batch_call``): one query for the tree."""
    wanted = {
        ((r.get("pending") or {}).get("batch") or {}).get("custom_id"): r
        for r in rows
        if r["waiting"] and (r.get("pending") or {}).get("reason") == "batch"
    }
    wanted.pop(None, None)
    if not wanted:
        return
    for call in m.BatchCall.objects.filter(pk__in=list(wanted)).values(
        "custom_id", "batch_id", "status", "created_at", "submitted_at"
    ):
        wanted[call["custom_id"]]["batch_call"] = call


def _key(key: str) -> Any:
    if len(key) <= KEY_SHOWN:
        return key
    return format_html('<span title="{}">{}…</span>', key, key[: KEY_SHOWN - 1])


def _node(row: dict[str, Any], current: str, by_parent: dict, site: str) -> Any:
    url = reverse("admin:sessions_app_turn_change", args=[row["id"]], current_app=site)
    goal = ((row.get("input") or {}).get("target") or {}).get("goal") or (row.get("input") or {}).get("text", "")
    waiting = _waiting(row)
    tokens = sum(int((row.get("usage") or {}).get(k) or 0) for k in TOKEN_KEYS)  # its own calls
    label = format_html(
        '<a href="{}"{}><code>{}</code></a> {}/{} — <span class="june-tree-status" data-status="{}">{}</span>{}'
        " · {} · started {} · {} tokens · <i>{}</i>",
        url,
        ' style="font-weight:bold"' if row["id"] == current else "",
        short_turn_id(row["id"]),
        row["session__agent"],
        _key(row["session__key"]),
        row["status"],
        row["status"],
        waiting,
        _seconds(row),
        timezone.localtime(row["created_at"]).strftime("%H:%M:%S"),
        tokens,
        str(goal)[:80],
    )
    kids = by_parent.get(row["id"]) or []
    inner = format_html_join("", "{}", ((_node(k, current, by_parent, site),) for k in kids))
    return format_html('<li class="june-tree-turn">{}{}</li>', label, format_html("<ul>{}</ul>", inner) if kids else "")


def tree_html(turn: m.Turn, site: str = "admin") -> Any:
    """The whole tree of ``turn`` (nested lists), or "-" when it has no parent and no children."""
    root = root_of(turn)
    by_parent = descendants(root.pk)
    if root.pk == turn.pk and not by_parent and not (turn.waiting and (turn.pending or {}).get("reason") == "batch"):
        return "-"  # (a turn alone that waits on a batch shows itself: what it waits on, since when)
    row = {f: getattr(root, f) if "__" not in f else None for f in FIELDS}
    row.update(session__agent=root.session.agent, session__key=root.session.key)
    every = [row] + [r for kids in by_parent.values() for r in kids]
    ends = generations.ended_at(every)
    for r in every:
        r["ended_at"] = ends.get(r["id"])
    with_batch_calls(every)
    note = format_html(
        "<p>depth limit {}, fan-out limit {} per tool call</p>", subagents.MAX_DEPTH, subagents.MAX_FANOUT
    )
    # wraps within the page (it was clipped at 1,280 px): long goals and keys break
    style = "white-space:normal;overflow-wrap:anywhere;max-width:100%;margin-left:0;padding-left:1.2em"
    return format_html('<ul class="june-tree" style="{}">{}</ul>{}', style, _node(row, turn.pk, by_parent, site), note)


def archived_children(session: m.Session, generation: int, limit: int = 500) -> list[dict[str, Any]]:
    """The child turns (all depths) of a generation's turns: an archive of a reset parent
    lists them (their transcripts live in their own sessions)."""
    roots = list(m.Turn.objects.filter(session=session, generation=generation).values_list("id", flat=True)[:500])
    out: list[dict[str, Any]] = []
    level = roots
    while level and len(out) < limit:
        rows = list(
            m.Turn.objects.filter(parent_id__in=level).order_by("created_at").values(*FIELDS)[: limit - len(out)]
        )
        out += rows
        level = [r["id"] for r in rows]
    return out
