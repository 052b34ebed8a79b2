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
    """The HTTP side of the router: ``app`` (Django's) behind the body limits, the API's burst
    path served whole on a bounded pool of threads (``StartGate``), the rest with its middleware
    run as one synchronous chain when it starts with a sync-only middleware (``one_hop``)."""
    from django.core.handlers.asgi import ASGIHandler

    from sessions_app.web.bodylimit import BodyLimit, guard_daphne
    from sessions_app.web.startgate import DjangoStart, StartGate

    guard_daphne()
    serve = DjangoStart(app) if isinstance(app, ASGIHandler) else None
    return BodyLimit(StartGate(one_hop(app), serve))


def one_hop(app: Any) -> Any:
    """Django's ASGI handler, made to enter a request's thread once.

    Django builds its ASGI middleware chain for an async bottom (``_get_response_async``): a
    chain whose first middleware is sync-only hands the request to its thread there, and the
    last middleware hands it back to the event loop for the bottom, which hands a sync view
    to the thread again — two trips through the server's event loop per request, where every
    connection's I/O waits its turn (a large share of daphne's loop under a burst of POSTs).
    When the chain starts with a sync-only middleware the whole chain is built synchronous
    instead, and entered once: a sync view runs on that thread (no hop), an async view is
    entered from it, as Django enters one below sync middleware. A chain whose first
    middleware is async-capable is left as Django builds it."""
    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.core.handlers.asgi import ASGIHandler
    from django.utils.module_loading import import_string

    if not isinstance(app, ASGIHandler) or getattr(app, "june_one_hop", False) or not settings.MIDDLEWARE:
        return app
    if getattr(import_string(settings.MIDDLEWARE[0]), "async_capable", True):
        return app
    app.load_middleware(is_async=False)
    # awaited by Django's ``get_response_async``, in the request's ThreadSensitiveContext (its thread)
    app._middleware_chain = sync_to_async(app._middleware_chain, thread_sensitive=True)
    app.june_one_hop = True
    return app


def websocket_application(prefix: str = "", routes: Sequence[Any] = ()) -> Any:
    """The websocket side of the router: origin check, then auth, then the routes."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter

    from sessions_app.web.bodylimit import guard_daphne
    from sessions_app.web.origin import SameOriginValidator

    guard_daphne()
    return SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns(prefix, routes))))
