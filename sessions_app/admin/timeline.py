"""A turn as a timeline: its steps (start, duration, tool, input, result, tokens), read from
its events and messages, as the turn admin page draws it; its phase and lease in words."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from sessions_app import generations
from sessions_app import models as m
from sessions_app.pricing import cost_of
from sessions_app.times import time_html
from sessions_app.wiring import agent_model

RESULT_SHOWN = 400
RESULT_MAX = 20_000


def seconds_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


PHASES = {
    "before_provider": "about to call the model",
    "provider_started": "calling the model (a crash here re-drives this model step)",
    "tool_request_recorded": "about to run a tool (recorded before it runs)",
    "committed": "its last step is committed",
    "parked": "parked: waiting for an answer",
}


def times_html(turn: m.Turn) -> SafeString:
    """When the turn was queued, started (its first claim) and ended, with the waits between."""
    queued, started, ended = turn.created_at, turn.started_at, turn.ended_at
    parts = [format_html("queued {}", time_html(queued, ms=True))]
    if started is not None:
        parts.append(
            format_html("started {} (waited {})", time_html(started, ms=True), seconds_text(_between(queued, started)))
        )
    if ended is not None:
        ran = f"ran {seconds_text(_between(started, ended))}" if started is not None else "never started"
        parts.append(format_html("ended {} ({})", time_html(ended, ms=True), ran))
    elif started is None:
        parts.append(format_html("{}", "not started yet"))
    return format_html_join(" · ", "{}", ((p,) for p in parts))


def _between(a: dt.datetime, b: dt.datetime) -> float:
    return (b - a).total_seconds()


def phase_text(turn: m.Turn) -> str:
    if not turn.phase:
        return "not started" if turn.status == m.TurnStatus.QUEUED else "—"
    words = PHASES.get(turn.phase, turn.phase)
    reason = (turn.journal or {}).get("reason") or (turn.pending or {}).get("reason")
    if turn.phase == "parked" and reason == "batch":
        words = "parked: waiting on a message batch (no person answers it; the batch poller resumes it)"
    tool = ((turn.journal or {}).get("tool_request") or {}).get("name")
    return f"{words} ({tool})" if tool and turn.phase == "tool_request_recorded" else words


#: the mark a runner leaves on a turn it took from the queue (``store.lease.TAKEN``: the admin reads
#: no store module, so it is said again here; a test holds the two equal)
TAKEN = "taken:"


def lease_text(turn: m.Turn, now: float) -> str:
    if turn.lease_expires_at is None:
        return "no lease" if turn.status != m.TurnStatus.RUNNING else "no lease yet"
    left = turn.lease_expires_at - now
    owner = turn.lease_owner or "nobody"
    if owner.startswith(TAKEN) and turn.status in (m.TurnStatus.QUEUED, m.TurnStatus.RUNNING):
        return _taken_text(owner.removeprefix(TAKEN), left)
    if turn.status != m.TurnStatus.RUNNING:
        return f"released (last held by {owner})"
    if owner.startswith("swept:"):
        return f"expired; re-enqueued by the sweeper {seconds_text(-left)} ago"
    if left >= 0:
        return f"held by {owner} for {seconds_text(left)} more"
    return f"expired {seconds_text(-left)} ago (held by {owner}); the sweeper re-enqueues it"


def _taken_text(runner: str, left: float) -> str:
    """A take's mark (``workers.taker``): a runner took the turn from the queue and claims it next;
    no lease yet."""
    if left >= 0:
        return f"none yet; taken by the runner {runner}, which claims it next (else any runner may take it in {seconds_text(left)})"
    return f"none; taken by the runner {runner}, whose mark ran out {seconds_text(-left)} ago: the next runner with room takes it"


def _short(value: Any) -> tuple[str, str]:
    """(the first characters, the whole text up to RESULT_MAX) of a JSON value."""
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str)
    )
    full = text if len(text) <= RESULT_MAX else text[:RESULT_MAX] + f"\n… ({len(text) - RESULT_MAX} more characters)"
    short = text if len(text) <= RESULT_SHOWN else text[:RESULT_SHOWN] + "…"
    return short, full


def timeline(turn: m.Turn) -> list[dict[str, Any]]:
    """The turn's steps from its events (and its messages' token counts), in time order."""
    events, data = generations.turn_events(turn)
    written = turn.written().filter(role="assistant").values_list("index", "data")
    usage_at = {idx: (d or {}).get("usage") or {} for idx, d in written}
    #: who answered each model step, when the provider says (``<provider>:<model>``; a fallback list)
    served_at = {idx: (d or {}).get("served_by") for idx, d in written}
    steps: list[dict[str, Any]] = []
    open_tools: dict[str, dict[str, Any]] = {}
    asked: dict[str, Any] = {}
    previous: dt.datetime | None = None
    for e, d in zip(events, data):
        d = d or {}
        at = e.at
        row: dict[str, Any] | None = None
        if e.type == "turn.started":
            trigger = d.get("trigger") or "inbound"
            short, full = _short(d.get("text") or "")
            row = {
                "kind": "start",
                "name": "resumed after the answer" if trigger == "resume" else f"started ({trigger})",
                "input": short,
                "input_full": full,
            }
        elif e.type == "message.completed":
            short, full = _short(d.get("text") or "")
            usage = usage_at.get(d.get("index"), {})
            served = served_at.get(d.get("index"))
            row = {
                "kind": "model",
                "name": f"model step ({served.replace(':', ' · ', 1)})" if served else "model step",
                "result": short,
                "result_full": full,
                "duration": seconds_text((at - previous).total_seconds()) if previous else "",
                "tokens": usage,
                "cost": cost_of(usage, served or agent_model(turn.session.agent)) if usage else None,
            }
        elif e.type == "action.requested":
            call = d.get("call") or {}
            short, full = _short(call.get("input"))
            row = {
                "kind": "tool",
                "name": call.get("name") or "?",
                "input": short,
                "input_full": full,
                "state": "running",
            }
            open_tools[str(call.get("id"))] = row
        elif e.type == "action.completed":
            tool = open_tools.pop(str(d.get("call_id")), None)
            value = d.get("error") if d.get("error") else d.get("result")
            short, full = _short(value)
            if tool is None:
                row = tool = {"kind": "tool", "name": d.get("name") or "?", "at": at, "input": "", "input_full": ""}
            tool.update(
                state="error" if d.get("error") else "completed",
                result=short,
                result_full=full,
                duration=seconds_text((at - tool["at"]).total_seconds()),
            )
        elif e.type == "input.requested":
            request = d.get("request") or {}
            row = {
                "kind": "input",
                "name": "question",  # with its state: "question waiting", "question answered"
                "input": request.get("prompt") or "",
                "input_full": json.dumps(request, indent=1, default=str),
                "state": "waiting",
            }
            asked[str(request.get("id"))] = row
        elif e.type == "input.answered":
            question = asked.get(str(d.get("input_id")))
            started = question["at"] if question else None
            if question is not None:  # it no longer waits (it read "waiting" after the answer)
                question["state"] = "answered"
            who = d.get("name") or d.get("by") or "someone"
            short, full = _short(d.get("answer"))
            row = {
                "kind": "answer",
                "name": f"answered by {who}" + (f" via {d['via']}" if d.get("via") else ""),
                "result": short,
                "result_full": full,
                "duration": seconds_text((at - started).total_seconds()) if started else "",
            }
        elif e.type in ("turn.completed", "turn.failed", "turn.cancelled"):
            detail = d.get("error") or d.get("reason") or ""
            if d.get("limited"):
                detail = (
                    f"at its limit of {str(d['limited']).replace('_', ' ')}: the last model call answered, no tools"
                )
            # its name says how it ended (no state beside it: it read "completed completed")
            row = {
                "kind": "end",
                "name": e.type.removeprefix("turn."),
                "result": str(detail)[:RESULT_SHOWN],
                "result_full": str(detail),
            }
        if row is not None:
            row.setdefault("at", at)
            row["seq"] = e.seq
            steps.append(row)
        previous = at
    if steps:
        first = steps[0]["at"]
        for row in steps:
            row["offset"] = seconds_text((row["at"] - first).total_seconds())
    return steps
