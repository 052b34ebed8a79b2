"""An agent's ``notify = {...}`` (agent.py): where its parks' notifications go, for the agent
and per answering policy. Checked when the agent loads; read by ``sessions_app.notify``.

    notify = {
        "email": True,                        # mail who may answer (default: the site's)
        "webhook_url": "https://hooks.slack.com/services/…",
        "policies": {"operator": {"webhook_url": "https://…teams…", "email": False}},
    }
"""

from __future__ import annotations

from typing import Any

from .errors import AgentConfigError

KEYS = {"email", "webhook_url"}


def _check_entry(agent: str, where: str, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise AgentConfigError(f"agent {agent!r}: notify{where} must be a dict")
    unknown = set(entry) - KEYS
    if unknown:
        raise AgentConfigError(f"agent {agent!r}: notify{where} has unknown keys {sorted(unknown)}")
    if "email" in entry and not isinstance(entry["email"], bool):
        raise AgentConfigError(f"agent {agent!r}: notify{where}['email'] must be True or False")
    url = entry.get("webhook_url")
    if url is not None and not (isinstance(url, str) and url.startswith(("https://", "http://")) and len(url) <= 500):
        raise AgentConfigError(f"agent {agent!r}: notify{where}['webhook_url'] must be an http(s) URL")
    return dict(entry)


def notify_config(agent: str, notify: Any) -> dict[str, Any]:
    """The checked ``notify`` dict (AgentConfigError on a bad one)."""
    if notify is None:
        notify = {}
    if not isinstance(notify, dict):
        raise AgentConfigError(f"agent {agent!r}: notify must be a dict")
    notify = dict(notify)
    policies = notify.pop("policies", None)
    policies = {} if policies is None else policies
    out = _check_entry(agent, "", notify)
    if not isinstance(policies, dict):
        raise AgentConfigError(f"agent {agent!r}: notify['policies'] must be a dict of policy -> settings")
    out["policies"] = {str(p): _check_entry(agent, f"['policies'][{p!r}]", e) for p, e in policies.items()}
    return out


def destination(notify: dict[str, Any], policy: str | None) -> dict[str, Any]:
    """The agent's settings, with the answering policy's own over them."""
    out = {k: v for k, v in notify.items() if k in KEYS}
    if policy:
        out.update((notify.get("policies") or {}).get(policy) or {})
    return out
