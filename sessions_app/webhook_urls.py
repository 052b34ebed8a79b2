"""Inbound webhook routes (mounted under /api/)."""

from django.urls import path

from . import webhook

urlpatterns = [
    path("agents/<str:agent>/webhook", webhook.agent_webhook, name="agent-webhook"),
]
