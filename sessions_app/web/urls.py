from django.urls import path

from sessions_app.web import views

app_name = "sessions_app"
urlpatterns = [
    path("", views.home, name="home"),
    path("agents/<str:agent>/sessions/new", views.session_new, name="session-new"),
    path("agents/<str:agent>/sessions/<str:key>/", views.chat, name="chat"),
]
