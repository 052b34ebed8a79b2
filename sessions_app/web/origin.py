"""The websocket's Origin check: scheme, host AND port, as Django's CSRF check compares them.

Channels' ``AllowedHostsOriginValidator`` compares the Origin's host name with ALLOWED_HOSTS
and ignores the port, so a page served by any other program on the same host
(``http://localhost:9999``) could open the chat socket with the user's cookie. Here an Origin
is accepted when it is

- the origin the browser connected to: its scheme is the connection's (``http`` for ``ws://``,
  ``https`` for ``wss://``, or for a proxy's ``SECURE_PROXY_SSL_HEADER``, as Django's
  ``request.scheme``), its host and port equal the ``Host`` header's (a port left out is the
  Origin scheme's default), and that host is in ALLOWED_HOSTS; without a ``Host`` header (only
  test clients send none) the Origin must name an allowed host on its scheme's default port; or
- listed in CSRF_TRUSTED_ORIGINS (``https://*.example.com`` covers the subdomains), compared
  on scheme, host and port.

Anything else, a missing or malformed Origin included, is refused before the handshake.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host (lowercased), port


def parse_origin(value: str) -> Origin | None:
    """``(scheme, host, port)`` of an http(s) origin, the port defaulted; None if malformed."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.username:
        return None
    host = parts.hostname.lower().removesuffix(".")
    if ":" in host:  # IPv6: as the Host header and ALLOWED_HOSTS write it
        host = f"[{host}]"
    return scheme, host, port if port is not None else DEFAULT_PORTS[scheme]


def _same_as_host(
    origin: Origin, host_header: str | None, allowed_hosts: list[str], connection_scheme: str | None = None
) -> bool:
    scheme, host, port = origin
    if connection_scheme is not None and scheme != connection_scheme:
        return False  # https://site is not the origin of a ws:// connection to it, nor http:// of wss://
    if host_header is None:
        return port == DEFAULT_PORTS[scheme] and validate_host(host, allowed_hosts)
    domain, host_port = split_domain_port(host_header)
    if not domain or not validate_host(domain, allowed_hosts):
        return False
    return domain == host and (int(host_port) if host_port else DEFAULT_PORTS[scheme]) == port


def _trusted(origin: Origin, trusted: list[str]) -> bool:
    scheme, host, port = origin
    for entry in trusted:
        wildcard = "://*." in entry
        parsed = parse_origin(entry.replace("://*.", "://", 1))
        if parsed is None or parsed[0] != scheme or parsed[2] != port:
            continue
        if host == parsed[1] or (wildcard and is_same_domain(host, "." + parsed[1])):
            return True
    return False


def connection_scheme(scope: dict[str, Any], headers: dict[bytes, str]) -> str:
    """The http(s) scheme of a websocket connection's page: ``wss`` (or the proxy's header that
    says so, ``SECURE_PROXY_SSL_HEADER``) is https, else http."""
    if scope.get("scheme") == "wss":
        return "https"
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, value = proxy
        header = name.lower().removeprefix("http_").replace("_", "-").encode("latin-1")
        if headers.get(header, "").split(",")[0].strip() == value:
            return "https"
    return "http"


def origin_allowed(
    origin_header: str | None,
    host_header: str | None,
    *,
    allowed_hosts: list[str] | None = None,
    trusted: list[str] | None = None,
    scheme: str | None = None,
) -> bool:
    if not origin_header:
        return False
    origin = parse_origin(origin_header)
    if origin is None:
        return False
    allowed_hosts = list(settings.ALLOWED_HOSTS if allowed_hosts is None else allowed_hosts)
    if settings.DEBUG and not allowed_hosts:
        allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]  # Django's own DEBUG default
    trusted = list(settings.CSRF_TRUSTED_ORIGINS if trusted is None else trusted)
    return _same_as_host(origin, host_header, allowed_hosts, scheme) or _trusted(origin, trusted)


class SameOriginValidator:
    """ASGI middleware for websocket scopes: deny the handshake unless ``origin_allowed``."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), value.decode("latin-1"))
        if origin_allowed(headers.get(b"origin"), headers.get(b"host"), scheme=connection_scheme(scope, headers)):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
