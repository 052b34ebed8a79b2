"""Inbound webhook routes (mounted under /api/)."""

from django.urls import path

from sessions_app.proactive import webhook

app_name = "june_webhooks"

urlpatterns = [
    path("agents/<str:agent>/webhook", webhook.agent_webhook, name="agent-webhook"),
]
