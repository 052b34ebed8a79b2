"""Inbound webhook routes (owned by the channels/schedules work)."""

urlpatterns: list = []
