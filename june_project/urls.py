from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sessions_app.admin import console

urlpatterns = [
    # the operator console's dashboard (sessions_app/admin/console.py), inside the admin's login
    path("admin/june/dashboard/", admin.site.admin_view(console.dashboard_view), name="june-dashboard"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("sessions_app.web.api_urls")),
    path("api/", include("sessions_app.proactive.webhook_urls")),
    path("", include("sessions_app.web.urls")),
]

# JSON errors under /api/ (Django's pages elsewhere)
handler404 = "sessions_app.web.api.handler404"
handler500 = "sessions_app.web.api.handler500"
