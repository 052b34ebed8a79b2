"""What deleted turns spent: when retention or an erasure deletes turns, their usage is added to
the row of their agent and day first, so the site's usage and cost totals stay, with no link to
the deleted content (no session, no user)."""

from __future__ import annotations

from django.db import models


class UsageTotal(models.Model):
    agent = models.CharField(max_length=64)
    day = models.DateField()
    turns = models.PositiveIntegerField(default=0)
    #: the turns' ``usage`` summed key by key (tokens by kind; numbers only)
    usage = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "day"], name="usage_total_day")]
        verbose_name = "usage of deleted turns"
        verbose_name_plural = "usage of deleted turns"

    def __str__(self) -> str:
        return f"{self.agent} {self.day}: {self.turns} turns"
