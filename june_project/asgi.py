"""ASGI entry point: HTTP through Django, websockets through Channels (auth + origin checked:
scheme, host and port, sessions_app.web.origin) — the helper a host project uses too
(``june.asgi``, docs/install.md), with June at the root."""

import functools
import gc
import logging
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
# a web process: its requests share a bounded connection pool on PostgreSQL (settings, DATABASE_POOL)
os.environ.setdefault("JUNE_PROCESS", "web")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from june.asgi import http_application, websocket_application  # noqa: E402


def _no_twisted_form_parsing() -> None:
    """Under daphne, Twisted parses every multipart body (an attachment's upload) into its own
    ``request.args``, which daphne never reads (Django parses the body): a second copy of each
    upload in memory, and a bare, non-JSON 400 for a form Twisted's parser refuses (an empty
    one) before the API can answer. Twisted's documented switch ``parsePOSTFormSubmission``
    (``twisted.web.http.Request``) turns that off for daphne's requests."""
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # another server: nothing to do
        return
    if not getattr(WebRequest, "_june_forms_off", False):
        WebRequest.__init__ = functools.partialmethod(WebRequest.__init__, parsePOSTFormSubmission=False)
        WebRequest._june_forms_off = True


def _patient_close_handshake(seconds: float = 5.0) -> None:
    """A consumer that refuses a socket accepts it and closes it with a code (4403: not yours).
    Autobahn, under daphne, then waits 1 s for the browser's answering close frame and aborts
    the TCP connection (a reset) when none came: a browser slower than that on a loaded machine
    loses the close frame it had not read yet and reports 1006, not the code. Wait ``seconds``."""
    try:
        from daphne.ws_protocol import WebSocketFactory
    except ImportError:
        return
    if getattr(WebSocketFactory, "_june_close_timeout", None) is None:
        init = WebSocketFactory.__init__

        @functools.wraps(init)
        def patient(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            self.closeHandshakeTimeout = seconds

        WebSocketFactory.__init__ = patient
        WebSocketFactory._june_close_timeout = seconds


def _no_unread_twisted_access_log() -> None:
    """Twisted's HTTP factory formats a combined-log line for every request (``HTTPFactory.log``)
    and hands it to Twisted's log, which daphne sends nowhere at its default verbosity (its own
    access log is another), and at a higher one to the logger ``daphne.server`` at INFO. The line
    is formatted only when that logger would keep it: what is written is unchanged."""
    try:
        from daphne.http_protocol import HTTPFactory
    except ImportError:
        return
    if getattr(HTTPFactory, "_june_quiet_log", False):
        return
    write = HTTPFactory.log
    kept = logging.getLogger("daphne.server")

    @functools.wraps(write)
    def log(self: Any, request: Any) -> None:
        if kept.isEnabledFor(logging.INFO):
            write(self, request)

    HTTPFactory.log = log
    HTTPFactory._june_quiet_log = True


def _freeze_startup_heap() -> None:
    """What start-up built (Django, the apps, the URLconf and the modules it imports, the agents)
    lives as long as the process: it is moved out of the garbage collector's view
    (``gc.freeze``), as the workers' is (``sessions_app.apps``). Otherwise every full collection
    walks it all again; a burst of requests makes several, each the length of the whole heap.
    The URLconf and the agents are loaded first (else the first request would load them);
    one that fails to load is left to fail where it did before, at that request."""
    from django.urls import get_resolver

    from sessions_app import wiring

    try:
        get_resolver().url_patterns  # noqa: B018 (imports the URLconf's modules)
        get_resolver().reverse_dict  # noqa: B018 (the API's links reverse routes)
        wiring.agents()
    except Exception:  # noqa: S110 (reported by the request that needs it, as before)
        pass
    gc.collect()
    gc.freeze()


_no_twisted_form_parsing()
_patient_close_handshake()
_no_unread_twisted_access_log()
application = ProtocolTypeRouter({"http": http_application(django_asgi_app), "websocket": websocket_application()})
_freeze_startup_heap()
