"""The demo ``ops`` agent (see README.md beside this file for what the demo model does)."""

from __future__ import annotations

import sys
from pathlib import Path

from django.conf import settings

from agents_app.agents.operators import OPERATORS_GROUP, is_operator  # noqa: F401 (the group: tests, docs)

# an MCP server as a tool source (docs/tools.md): the demo inventory, a stdio subprocess of each
# worker process, its stock and reservations in one SQLite file of the site's var directory
# (shared by those processes; a call retried after a crash is deduped there); its tools are
# inventory__count and inventory__reserve. On where JUNE_DEMO_MCP is set (`python3 dev.py run`
# sets it); the test suite leaves it off but for its MCP tests
mcp = (
    [
        {
            "name": "inventory",
            "command": [
                sys.executable,
                str(Path(__file__).with_name("inventory_server.py")),
                str(Path(settings.JUNE_VAR_DIR) / "demo-inventory.sqlite3"),
            ],
            "timeout": 15,
        },
    ]
    if settings.JUNE_DEMO_MCP
    else []
)

# provider: None = anthropic when ANTHROPIC_API_KEY is set, else the offline demo model
model = None
model_config = {"model": "claude-sonnet-4-5", "max_tokens": 2048}


def authorize_answer(*, policy, scope, by, principal):
    """An ``operator`` grant goes to active staff members of the operators group
    (``agents_app/agents/operators.py``)."""
    return policy == "operator" and principal is not None and is_operator(principal)


def authorize_takeover(*, session, principal):
    """Operators (the same group as ``authorize_answer``'s) may take a session over and answer
    its user themselves (docs/operations.md "Takeover")."""
    return principal is not None and is_operator(principal)


# -- proactive turns and per-source policies (docs/proactive.md) -----------------------------------

#: the daily summary lands in the demo user's "Ops inbox" session (the chat UI lists it)
schedules = [
    {
        "name": "daily-summary",
        "cron": "0 9 * * *",
        "timezone": "Europe/Paris",
        "seed": "summary of today",
        "session": "ops-inbox",
        "owner": "demo",
        "title": "Ops inbox",
    },
]

#: turns from a webhook get instructions.webhook.md appended and cannot place orders
surfaces = {"webhook": {"mode": "append", "deny_tools": ["create_order"]}}

#: an unsigned webhook is refused (401); "unattested" would run it with an unattested speaker
settings = {"webhook": {"unsigned": "refuse"}}

# the chat's composer suggests what the demo model answers (README.md beside this file)
hints = [
    "order mugs",
    "stock tea",
    "flaky",
    "essay",
    "refund order 1 20",
    "bulk order 50 mugs",
    "research tides and harbours",
]
