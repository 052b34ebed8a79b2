"""The demo ``researcher`` agent: the child the ``ops`` agent's ``research`` tool spawns
(docs/subagents.md)."""

from __future__ import annotations

# provider: None = anthropic when ANTHROPIC_API_KEY is set, else the offline demo model
model = None
model_config = {"model": "claude-sonnet-4-5", "max_tokens": 1024}
