"""Who started a turn, as the approval inbox and the dashboard say it ("requested by").

A turn nobody owns said "inbound" (its kind, an internal word): the inbox now says what started
it — the webhook, the schedule, an eval run, a subagent's parent, the command line."""

from __future__ import annotations

import pytest

from sessions_app.listings import started_by


@pytest.mark.parametrize(
    "speaker,username,by,source,said",
    [
        ({"id": "u:7", "name": "Alice"}, "alice", "", "web", "Alice"),
        ({}, "alice", "", "http", "alice"),
        ({"id": "webhook:anonymous", "name": "webhook"}, "", "", "webhook", "a webhook call (no user named)"),
        ({"id": "webhook:crm-42", "name": "crm-42"}, "", "", "webhook", "crm-42 (by webhook)"),
        ({}, "", "cron:stocktake", "schedule", "the schedule stocktake"),
        ({}, "", "nightly-report", "channel", "the trigger nightly-report"),
        ({}, "", "", "eval", "an eval run (no person)"),
        ({}, "", "", "spawn", "its parent agent (a subagent's turn)"),
        ({}, "", "", "cli", "the command line (manage.py june)"),
        ({}, "", "", "http", "an API call with no user"),
        ({}, "", "", "mqtt", "mqtt (no person)"),
        ({}, "", "", "", "nobody (no user, webhook or schedule)"),
    ],
)
def test_a_turns_starter_in_plain_words(speaker, username, by, source, said):
    assert started_by(speaker=speaker, username=username, by=by, source=source) == said
    assert "inbound" not in said
