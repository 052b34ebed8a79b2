"""How long an agent's conversations are kept (``retention`` in agent.py, over the site's
``JUNE_RETENTION``): plain data, checked once when the agent loads.

``sessions_days``: a session idle this long goes whole (every generation, its uploads);
``archived_days``: a generation put away by a reset or left as a branch goes this long after its
last turn; ``attachments_days``: uploads (rows and files) go this long after they were made, the
messages that named them staying. ``None`` (or absent): kept. A session under legal hold is kept
whatever its agent says."""

from __future__ import annotations

from typing import Any

from .errors import AgentConfigError

RETENTION_KEYS = ("sessions_days", "archived_days", "attachments_days")


def retention_config(value: Any, *, owner: str) -> dict[str, float | None]:
    """``value`` checked: a dict of ``RETENTION_KEYS`` to a positive number of days or None
    (AgentConfigError otherwise, naming ``owner``: the agent, or the setting)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AgentConfigError(f"{owner}: retention must be a dict of {', '.join(RETENTION_KEYS)}")
    unknown = sorted(set(value) - set(RETENTION_KEYS))
    if unknown:
        raise AgentConfigError(f"{owner}: unknown retention keys {unknown} (known: {', '.join(RETENTION_KEYS)})")
    checked: dict[str, float | None] = {}
    for key, days in value.items():
        if days is not None and (isinstance(days, bool) or not isinstance(days, int | float) or not days > 0):
            raise AgentConfigError(f"{owner}: retention {key} must be a positive number of days or None")
        checked[key] = None if days is None else float(days)
    return checked


def effective_retention(site: dict[str, float | None], agent: dict[str, float | None]) -> dict[str, float | None]:
    """The agent's rules over the site's: a key the agent names (None included) wins."""
    return {key: agent[key] if key in agent else site.get(key) for key in RETENTION_KEYS}
