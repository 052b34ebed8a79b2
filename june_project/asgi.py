"""ASGI entry point: HTTP through Django, websockets through Channels (auth + origin checked:
scheme, host and port, sessions_app.web.origin)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
# a web process: its requests share a bounded connection pool on PostgreSQL (settings, DATABASE_POOL)
os.environ.setdefault("JUNE_PROCESS", "web")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from sessions_app.web.routing import websocket_urlpatterns  # noqa: E402
from sessions_app.web.origin import SameOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
