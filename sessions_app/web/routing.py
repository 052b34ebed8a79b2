"""Websocket routes (wrapped by auth and the origin check: ``june.asgi``).

The session segment takes any key, so a malformed one is refused by the consumer with 4400
(like the HTTP API's 400); any other path reaches ``NoRoute``, which closes with 4404: a path
that matches nothing is never a handshake 500. ``prefix`` is June's mount (``"assistant/"``
under ``path("assistant/", include("june.urls"))``; empty at the root)."""

from __future__ import annotations

import re

from django.urls import re_path

from sessions_app.web.consumers import NoRouteConsumer, SessionConsumer


def session_routes(prefix: str = "") -> list:
    return [
        re_path(
            rf"^{re.escape(prefix)}ws/agents/(?P<agent>[A-Za-z0-9_-]{{1,64}})/sessions/(?P<session>[^/]+)/$",
            SessionConsumer.as_asgi(),
        )
    ]


def no_route() -> list:
    return [re_path(r"", NoRouteConsumer.as_asgi())]


websocket_urlpatterns = [*session_routes(), *no_route()]
