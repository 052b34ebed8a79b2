"""Is the login behind an open websocket still valid, and telling a user's sockets when it may
not be (the chat consumer: ``consumers``).

A socket is authenticated once, at its handshake; the login can end while it stays open (a
logout in another tab, the session's row deleted, the account deactivated, the password
changed). So every frame that acts re-reads the login as Django would for a new request
(``login_valid``: the session's row, its user through the authentication backend — an inactive
user is nobody for ``ModelBackend`` — and the password hash it was made with), and a logout or a
deactivation tells the user's sockets at once (``user_group``; ``on_logged_out``,
``on_user_saved``), each of which checks its own login and closes if it ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import auth
from django.db import transaction

log = logging.getLogger(__name__)

#: the layer message a user's sockets get when their login may have ended
RECHECK = "june.login_check"


def user_group(pk: Any) -> str:
    """The channel-layer group of one user's chat sockets (any primary key type)."""
    return "june-user-" + hashlib.sha256(str(pk).encode()).hexdigest()[:32]


def login_valid(session_key: str | None, user_pk: Any) -> bool:
    """Whether the login ``session_key`` still stands for the user ``user_pk`` (a fresh read)."""
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = auth.get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
    return bool(user.is_authenticated) and user.pk == user_pk


def tell_user(pk: Any, *, ended: str | None = None) -> None:
    """Ask every chat socket of user ``pk`` (every process) to check its login now; the sockets
    of the login ``ended`` (a session key) close whatever their check says (a logout signals
    before it deletes the session's row)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": RECHECK, "ended": ended}
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    try:
        if loop is None:
            async_to_sync(layer.group_send)(user_group(pk), message)
        else:  # called from async code: send without blocking its loop
            loop.create_task(layer.group_send(user_group(pk), message))
    except Exception:  # the sockets still check at their next frame
        log.warning("could not tell user %s's sockets to check their login", pk, exc_info=True)


def on_logged_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """``user_logged_out``: that browser's sockets close (the user's others keep their login)."""
    if user is not None and getattr(user, "pk", None) is not None:
        pk, ended = user.pk, getattr(getattr(request, "session", None), "session_key", None)
        transaction.on_commit(lambda: tell_user(pk, ended=ended))


def on_user_saved(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    """``post_save`` of the user model: a deactivated account's sockets close."""
    if update_fields is not None and "is_active" not in update_fields:
        return
    if getattr(instance, "is_active", True) is False:
        pk = instance.pk
        transaction.on_commit(lambda: tell_user(pk))
