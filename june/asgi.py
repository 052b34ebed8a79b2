"""June's websockets in a project's ASGI router::

    # asgi.py of a host project
    import os
    from django.core.asgi import get_asgi_application

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    django_asgi_app = get_asgi_application()  # before anything imports models

    from channels.routing import ProtocolTypeRouter

    from june.asgi import http_application, websocket_application

    application = ProtocolTypeRouter({
        "http": http_application(django_asgi_app),
        "websocket": websocket_application(prefix="assistant/"),  # as in include("june.urls")
    })

``http_application`` bounds every request body before it is read (a larger one is a 413, by its
``Content-Length``, or as a chunked one streams; ``JUNE_MAX_BODY_BYTES`` for paths that declare no
limit of their own): under daphne, which reads a whole body before the application sees the
request, by a hook in daphne itself, which ``websocket_application`` installs too.

Every websocket is authenticated (Django's session, as the pages) and its ``Origin`` checked
(scheme, host and port of the request, or ``CSRF_TRUSTED_ORIGINS``). A project with websocket
routes of its own passes them as ``routes``: they come before June's catch-all, which closes
any unknown path with 4404.
"""

from __future__ import annotations

from typing import Any, Sequence


def websocket_urlpatterns(prefix: str = "", routes: Sequence[Any] = ()) -> list:
    """June's routes under ``prefix``, then ``routes``, then the catch-all (4404)."""
    from sessions_app.web.routing import no_route, session_routes

    return [*session_routes(prefix), *routes, *no_route()]


def http_application(app: Any) -> Any:
    """The HTTP side of the router: ``app`` (Django's) behind the body limits."""
    from sessions_app.web.bodylimit import BodyLimit, guard_daphne

    guard_daphne()
    return BodyLimit(app)


def websocket_application(prefix: str = "", routes: Sequence[Any] = ()) -> Any:
    """The websocket side of the router: origin check, then auth, then the routes."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter

    from sessions_app.web.bodylimit import guard_daphne
    from sessions_app.web.origin import SameOriginValidator

    guard_daphne()
    return SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns(prefix, routes))))
