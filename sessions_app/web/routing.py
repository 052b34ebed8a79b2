"""Websocket routes (wrapped by auth and the origin check in june_project/asgi.py)."""

from django.urls import re_path

from sessions_app.web.consumers import SessionConsumer

websocket_urlpatterns = [
    re_path(r"^ws/agents/(?P<agent>[A-Za-z0-9_-]{1,64})/sessions/(?P<session>[^/]{1,200})/$",
            SessionConsumer.as_asgi()),
]
