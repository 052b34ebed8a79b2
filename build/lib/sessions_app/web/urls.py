from django.urls import path

from sessions_app.web import archive, views

app_name = "sessions_app"
urlpatterns = [
    path("", views.home, name="home"),
    path("agents/<str:agent>/sessions/new", views.session_new, name="session-new"),
    path("agents/<str:agent>/sessions/<str:key>/", views.chat, name="chat"),
    path("agents/<str:agent>/sessions/<str:key>/title", views.session_title, name="session-title"),
    path("agents/<str:agent>/sessions/<str:key>/archive/", archive.archive, name="archive"),
    path("agents/<str:agent>/sessions/<str:key>/archive/<int:generation>/", archive.archive_generation,
         name="archive-generation"),
]
