"""Inbound webhook routes (mounted under /api/)."""

from django.urls import path

from sessions_app.proactive import webhook

urlpatterns = [
    path("agents/<str:agent>/webhook", webhook.agent_webhook, name="agent-webhook"),
]
