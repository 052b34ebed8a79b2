from django.contrib.auth import views as auth_views
from django.urls import path

from sessions_app.web import archive, downloads, views

app_name = "sessions_app"
urlpatterns = [
    path("", views.home, name="home"),
    # a login page for the people who chat (the admin's refuses all but staff): a project points
    # LOGIN_URL here ("sessions_app:login", docs/install.md) or at its own
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="sessions_app/login.html", next_page="sessions_app:home"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="sessions_app:login"), name="logout"),
    # an agent's address, or its sessions', trimmed from a chat's: the home page's part for the
    # agent (with these, APPEND_SLASH also has a page to send "/agents/ops" to)
    path("agents/<str:agent>/", views.agent_sessions, name="agent"),
    path("agents/<str:agent>/sessions/", views.agent_sessions),
    path("agents/<str:agent>/sessions/new", views.session_new, name="session-new"),
    path("agents/<str:agent>/sessions/<str:key>/", views.chat, name="chat"),
    path("agents/<str:agent>/sessions/<str:key>/title", views.session_title, name="session-title"),
    path("agents/<str:agent>/sessions/<str:key>/archive/", archive.archive, name="archive"),
    path(
        "agents/<str:agent>/sessions/<str:key>/archive/<int:generation>/",
        archive.archive_generation,
        name="archive-generation",
    ),
]
# downloads of a conversation (web/downloads.py): .md and .json of the live and archived generations
for fmt in ("md", "json"):
    urlpatterns += [
        path(
            f"agents/<str:agent>/sessions/<str:key>/export.{fmt}",
            downloads.export_live,
            {"fmt": fmt},
            name=f"export-{fmt}",
        ),
        path(
            f"agents/<str:agent>/sessions/<str:key>/archive/<int:generation>/export.{fmt}",
            downloads.export_archived,
            {"fmt": fmt},
            name=f"archive-export-{fmt}",
        ),
    ]
