from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from sessions_app.admin import console
from sessions_app.web import api, apidocs, health

urlpatterns = [
    # health for a load balancer or an orchestrator (docs/operations.md "Health"): JSON, no login,
    # with or without a trailing slash (so APPEND_SLASH never redirects a probe)
    re_path(r"^healthz/?$", health.healthz, name="healthz"),
    re_path(r"^readyz/?$", health.readyz, name="readyz"),
    # the operator console's dashboard (sessions_app/admin/console.py), inside the admin's login
    path("admin/june/dashboard/", admin.site.admin_view(console.dashboard_view), name="june-dashboard"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("sessions_app.web.api_urls")),
    path("api/", include("sessions_app.proactive.webhook_urls")),
    # the HTTP API's document rendered for people (HTML; not part of the API it describes)
    path("api/docs/", apidocs.api_docs, name="api-docs"),
    # every other path under /api/, any method, with or without a slash: a JSON 404 (it also
    # keeps APPEND_SLASH from redirecting: a matched path is never redirected)
    re_path(r"^api/", api.not_found),
    path("", include("sessions_app.web.urls")),
]

# JSON errors under /api/ and for the health probes (Django's pages elsewhere)
handler400 = "sessions_app.web.api.handler400"
handler404 = "sessions_app.web.api.handler404"
handler500 = "sessions_app.web.api.handler500"
