"""This repository's site: June mounted at the root, as a host project mounts it under a prefix
(``june.urls``, docs/install.md), with the admin, a login and the health probes of its own."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from june.urls import health_urlpatterns
from sessions_app.admin import console

# this site's admin says whose it is (a host project's admin keeps its own titles)
admin.site.site_header = admin.site.site_title = "June administration"
admin.site.index_title = "Agents, sessions and approvals"


def no_icon(request: HttpRequest) -> HttpResponse:
    """The admin's pages name no icon, so browsers ask for /favicon.ico: nothing, not a 404 in
    the server's log on every admin page (June's own pages link an empty icon)."""
    return HttpResponse(status=204, headers={"Cache-Control": "max-age=86400"})


urlpatterns = [
    path("favicon.ico", no_icon),
    # health for a load balancer or an orchestrator (docs/operations.md "Health")
    *health_urlpatterns,
    # the operator console's dashboard (sessions_app/admin/console.py), inside the admin's login
    path("admin/june/dashboard/", admin.site.admin_view(console.dashboard_view), name="june-dashboard"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("june.urls")),
]

# JSON errors under the API and for the health probes (Django's pages elsewhere)
handler400 = "sessions_app.web.api.handler400"
handler404 = "sessions_app.web.api.handler404"
handler500 = "sessions_app.web.api.handler500"
