"""Who may use which session from a user-facing transport (chat, API, websocket): a session's
owner only; the namespaces a channel owns (webhooks', subagents', an agent's schedules') are
created by nobody else. ``services`` re-exports these for the transports."""

from __future__ import annotations

import copy
import re
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from agents_app.cron import declarations
from agents_app.runtime import subagents
from agents_app.runtime.errors import NotFound
from sessions_app import models as m
from sessions_app import wiring
from sessions_app.outbox.deliveries import WEBHOOK_SESSIONS
from sessions_app.site_errors import AccessDenied, BadRequest

SESSION_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}")


def user_identity(user: Any, *, attested: bool = True) -> dict[str, Any] | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return {"id": str(user.pk), "name": user.get_username(), "attested": attested}


def validate_session_key(key: str) -> str:
    if not isinstance(key, str) or not SESSION_KEY_RE.fullmatch(key):
        raise BadRequest("a session key is 1-200 characters: letters, digits and _ . : @ -")
    return key


#: session keys in this namespace are subagents' (``subagents.child_key``): only a spawn makes one
CHILD_PREFIX = subagents.SESSION_PREFIX
#: session keys in this namespace belong to the webhook channel (``webhook_session_key``)
WEBHOOK_PREFIX = WEBHOOK_SESSIONS  # the one definition is the outbox's (deliveries are made for these)


def webhook_session_key(key: str) -> str:
    """Where a webhook's session lives: a namespace no user can create, so a user cannot
    squat a key a webhook will use, nor a webhook reach a user's session."""
    validate_session_key(key)
    if len(key) > 200 - len(WEBHOOK_PREFIX):
        raise BadRequest(f"a webhook session key is at most {200 - len(WEBHOOK_PREFIX)} characters")
    return WEBHOOK_PREFIX + key


def _schedule_owner(agent: str, key: str) -> tuple[bool, str | None]:
    """(declared, owner username) when ``key`` is the session of one of the agent's schedules."""
    for pattern, owner in _schedule_keys(wiring.agent(agent)):
        if pattern.fullmatch(key):
            return True, owner
    return False, None


#: agent name -> (a copy of its ``schedules`` as declared, their (session pattern, owner)):
#: validating the declarations (each cron parsed, each zone looked up) is done once per agent,
#: not at every new session's first message
_keys_of: dict[str, tuple[list[Any], list[tuple[re.Pattern[str], str | None]]]] = {}


def _schedule_keys(agent: Any) -> list[tuple[re.Pattern[str], str | None]]:
    """The session patterns of ``agent``'s schedules, and their owners; made again whenever its
    declared schedules differ from the ones they were made from (an agent reloaded or changed)."""
    declared = list(agent.schedules or [])
    kept = _keys_of.get(agent.name)
    if kept is None or kept[0] != declared:
        keys = [(d.session_pattern(), d.owner) for d in declarations(agent, default_tz=settings.TIME_ZONE)]
        kept = _keys_of[agent.name] = (copy.deepcopy(declared), keys)
    return kept[1]


def session_for_user(*, agent: str, key: str, user: Any, create: bool = False) -> m.Session | None:
    """The session if ``user`` may use it from a user-facing transport (chat, API, websocket):
    only its owner may. Creates it, owned by ``user``, when ``create`` and absent. Sessions
    with no owner (webhook sessions, schedules without an owner) are reachable by nobody here:
    staff see them in the admin, and answer their requests there under the same policies.
    A key that the webhook channel or one of the agent's schedules owns cannot be created by
    anyone else. AccessDenied otherwise."""
    wiring.agent(agent, versions=False)  # NotFound for an unknown agent (and an eval's version)
    validate_session_key(key)
    # (agent, key) is unique: LIMIT 1 with no ORDER BY to compile (first() would add one)
    session = next(iter(m.Session.objects.filter(agent=agent, key=key)[:1]), None)
    if session is None:
        if not create:
            return None
        _check_creatable(agent, key, user)
        session = _create_session(agent, key, user)
    if session.owner_id is None:
        raise AccessDenied("this session has no owner: it is reachable in the admin only")
    if session.owner_id != getattr(user, "pk", None):
        raise AccessDenied("this session belongs to another user")
    return session


def start_checked_by_store(*, agent: str, key: str, user: Any) -> bool:
    """Before ``user`` starts a turn in the session ``key``: True when the creation itself may
    apply ``session_for_user(create=True)``'s rule (the store creates a user's turn only in a
    session that user owns or creates, raising ``NotSessionOwner`` otherwise, which
    ``refused_start`` turns into this module's refusal), so the start reads nothing first. False
    for a key a channel owns (webhooks', subagents', one of the agent's schedules'), or a caller
    that is not a saved user: ``session_for_user(create=True)`` then checks it before the start.
    NotFound, BadRequest as ``session_for_user``."""
    wiring.agent(agent, versions=False)  # NotFound for an unknown agent (and an eval's version)
    validate_session_key(key)
    if getattr(user, "pk", None) is None or key.startswith((WEBHOOK_PREFIX, CHILD_PREFIX)):
        return False
    return not _schedule_owner(agent, key)[0]


def refused_start(*, agent: str, key: str, user: Any) -> Exception:
    """Why the store refused ``user``'s start in ``key`` (``NotSessionOwner``): the refusal
    ``session_for_user`` raises for that session (raised here), else NotFound (it went meanwhile)."""
    session_for_user(agent=agent, key=key, user=user)
    return NotFound(f"no session {key!r} of agent {agent!r}")


def _create_session(agent: str, key: str, owner: Any) -> m.Session:
    """The session, created for ``owner``; the one a concurrent request created first, if any
    (``get_or_create`` without its first read: the caller has just read and found none).
    In autocommit the INSERT is its own transaction: a duplicate key fails it alone, so no
    BEGIN and COMMIT around it (two round trips of a new session's first message); inside a
    caller's transaction a savepoint keeps that transaction usable after the duplicate."""
    connection = transaction.get_connection()
    try:
        if not connection.in_atomic_block:
            return m.Session.objects.create(agent=agent, key=key, owner=owner)
        with transaction.atomic():
            return m.Session.objects.create(agent=agent, key=key, owner=owner)
    except IntegrityError:
        return m.Session.objects.get(agent=agent, key=key)


def _check_creatable(agent: str, key: str, user: Any) -> None:
    """AccessDenied unless ``user`` may create the session ``key`` (a namespace a channel owns:
    webhooks', subagents', one of the agent's schedules')."""
    if key.startswith(WEBHOOK_PREFIX):
        raise AccessDenied(f"session keys starting with {WEBHOOK_PREFIX!r} belong to the webhook channel")
    if key.startswith(CHILD_PREFIX):
        raise AccessDenied(f"session keys starting with {CHILD_PREFIX!r} belong to subagents")
    declared, owner = _schedule_owner(agent, key)
    if declared and owner != getattr(user, "get_username", lambda: None)():
        raise AccessDenied("this session key belongs to a schedule of the agent")


def session_to_open(*, agent: str, key: str, user: Any) -> m.Session | None:
    """The session a page or a socket opens (a GET): the user's, or None when it does not exist
    yet and the user may create it — the first message creates it; opening creates nothing.
    AccessDenied, NotFound, BadRequest as ``session_for_user``."""
    session = session_for_user(agent=agent, key=key, user=user)
    if session is None:
        _check_creatable(agent, key, user)
    return session
