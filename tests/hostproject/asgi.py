import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproject.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from june.asgi import http_application, websocket_application  # noqa: E402

application = ProtocolTypeRouter(
    {"http": http_application(django_asgi_app), "websocket": websocket_application(prefix="assistant/")}
)
