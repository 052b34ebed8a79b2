"""Where June is mounted: every link, ``Location`` and websocket URL follows the prefix a project
includes June under (``path("assistant/", include("june.urls"))``; this repository's site mounts
it at the root). The prefixes come from the URLconf itself (``reverse``), so a link is right under
any prefix and under ``FORCE_SCRIPT_NAME``."""

from __future__ import annotations

from urllib.parse import quote

from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.http import RFC3986_SUBDELIMS


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


#: what ``reverse`` leaves unquoted in a value it substitutes (``django.urls.resolvers``)
_SAFE = RFC3986_SUBDELIMS + "/~:@"
#: (urlconf, script prefix) -> the turn route reversed once, a format string of its three values
_turn_routes: dict[tuple[object, str], str] = {}
_MARKS = {"agent": "j9agent9j", "session": "j9session9j", "turn_id": "j9turn9j"}


def turn_api(agent: str, key: str, turn_id: str) -> str:
    """A turn's API URL, as ``reverse("june_api:turn", …)`` gives it: the route reversed once
    per URLconf and prefix, its values quoted as ``reverse`` quotes them (each 202 of a start
    carries one; reversing was a visible share of a start's CPU). A value the route's ``str``
    converter would refuse (empty, or with a slash) is left to ``reverse`` (``NoReverseMatch``)."""
    if not (agent and key and turn_id) or "/" in agent or "/" in key or "/" in turn_id:
        return reverse("june_api:turn", kwargs={"agent": agent, "session": key, "turn_id": turn_id})
    where = (get_urlconf(), get_script_prefix())
    route = _turn_routes.get(where)
    if route is None:
        route = reverse("june_api:turn", kwargs=_MARKS).replace("{", "{{").replace("}", "}}")
        for name, mark in _MARKS.items():
            route = route.replace(mark, "{" + name + "}")
        _turn_routes[where] = route
    return route.format(
        agent=quote(agent, safe=_SAFE), session=quote(key, safe=_SAFE), turn_id=quote(turn_id, safe=_SAFE)
    )


def websocket(agent: str, key: str) -> str:
    return f"{mount()}ws/agents/{agent}/sessions/{key}/"
