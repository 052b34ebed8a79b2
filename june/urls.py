"""June's HTTP routes, for a project to mount under any prefix::

    path("assistant/", include("june.urls"))

gives the sessions and chat at ``/assistant/``, the HTTP API at ``/assistant/api/`` (its document
at ``/assistant/api/openapi.json``, rendered at ``/assistant/api/docs/``) and the agents'
webhooks at ``/assistant/api/agents/<agent>/webhook``. The websocket routes go into the
project's ASGI router with the same prefix (``june.asgi``); the admin pages come with the
project's admin site (June registers its models); ``health_urlpatterns`` are the probes, for a
project that wants them (``/healthz``, ``/readyz``: docs/operations.md).

URL names are namespaced: ``sessions_app:…`` (pages), ``june_api:…``, ``june_webhooks:…``.
"""

from django.urls import include, path, re_path

from sessions_app.web import api, apidocs, probes

urlpatterns = [
    path("api/", include("sessions_app.web.api_urls")),
    # the API's document rendered for people (HTML; not part of the API it describes)
    path("api/docs/", apidocs.api_docs, name="june-api-docs"),
    path("api/", include("sessions_app.proactive.webhook_urls")),
    # every other path under api/, any method, with or without a slash: a JSON 404 (it also keeps
    # APPEND_SLASH from redirecting: a matched path is never redirected)
    re_path(r"^api/", api.not_found),
    path("", include("sessions_app.web.urls")),
]

# JSON, no login, with or without a trailing slash (so APPEND_SLASH never redirects a probe)
health_urlpatterns = [
    re_path(r"^healthz/?$", probes.healthz, name="healthz"),
    re_path(r"^readyz/?$", probes.readyz, name="readyz"),
]
