"""ASGI entry point: HTTP through Django, websockets through Channels (auth + origin checked:
scheme, host and port, sessions_app.web.origin) — the helper a host project uses too
(``june.asgi``, docs/install.md), with June at the root."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
# a web process: its requests share a bounded connection pool on PostgreSQL (settings, DATABASE_POOL)
os.environ.setdefault("JUNE_PROCESS", "web")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from june.asgi import websocket_application  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application()})
