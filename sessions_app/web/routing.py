"""Websocket routes (wrapped by auth and the origin check in june_project/asgi.py).

The session segment takes any key, so a malformed one is refused by the consumer with 4400
(like the HTTP API's 400); any other path reaches ``NoRoute``, which closes with 4404: a path
that matches nothing is never a handshake 500."""

from django.urls import re_path

from sessions_app.web.consumers import NoRouteConsumer, SessionConsumer

websocket_urlpatterns = [
    re_path(r"^ws/agents/(?P<agent>[A-Za-z0-9_-]{1,64})/sessions/(?P<session>[^/]+)/$",
            SessionConsumer.as_asgi()),
    re_path(r"", NoRouteConsumer.as_asgi()),
]
