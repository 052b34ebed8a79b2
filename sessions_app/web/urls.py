from django.urls import path

from sessions_app.web import archive, export, views

app_name = "sessions_app"
urlpatterns = [
    path("", views.home, name="home"),
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
# downloads of a conversation (web/export.py): .md and .json of the live and archived generations
for fmt in ("md", "json"):
    urlpatterns += [
        path(
            f"agents/<str:agent>/sessions/<str:key>/export.{fmt}",
            export.export_live,
            {"fmt": fmt},
            name=f"export-{fmt}",
        ),
        path(
            f"agents/<str:agent>/sessions/<str:key>/archive/<int:generation>/export.{fmt}",
            export.export_archived,
            {"fmt": fmt},
            name=f"archive-export-{fmt}",
        ),
    ]
