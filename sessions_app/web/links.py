"""Where June is mounted: every link, ``Location`` and websocket URL follows the prefix a project
includes June under (``path("assistant/", include("june.urls"))``; this repository's site mounts
it at the root). The prefixes come from the URLconf itself (``reverse``), so a link is right under
any prefix and under ``FORCE_SCRIPT_NAME``."""

from __future__ import annotations

from django.urls import get_urlconf, reverse


def api_base() -> str:
    """The API's prefix, ``/api/`` at the root: what ``openapi.json`` is under."""
    return reverse("june_api:openapi").removesuffix("openapi.json")


def mount() -> str:
    """June's own prefix (its sessions list), ``/`` at the root; its websocket routes are under it
    (``june.asgi.websocket_urlpatterns(prefix)``)."""
    return reverse("sessions_app:home")


def is_api_path(path: str) -> bool:
    """Whether ``path`` is under the API (its errors are JSON). Never raises: a project whose
    URLconf has no June API answers no."""
    try:
        return path.startswith(_api_base_of(get_urlconf()))
    except Exception:  # NoReverseMatch: June's API is not mounted here
        return False


_bases: dict[object, str] = {}


def _api_base_of(urlconf: object) -> str:
    if urlconf not in _bases:
        _bases[urlconf] = api_base()
    return _bases[urlconf]


def session_api(agent: str, key: str) -> str:
    """A session's API prefix, ``…/api/agents/<agent>/sessions/<key>/``."""
    return f"{api_base()}agents/{agent}/sessions/{key}/"


def turn_api(agent: str, key: str, turn_id: str) -> str:
    return reverse("june_api:turn", kwargs={"agent": agent, "session": key, "turn_id": turn_id})


def websocket(agent: str, key: str) -> str:
    return f"{mount()}ws/agents/{agent}/sessions/{key}/"
