"""Data of the demo agent's tools (a real site's agents bring their own models)."""

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=200)
    quantity = models.IntegerField(default=1)
    turn_id = models.CharField(max_length=32, blank=True, default="")
    call_id = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order #{self.pk}: {self.quantity} x {self.item}"


class Refund(models.Model):
    order_ref = models.CharField(max_length=64)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    #: the idempotency key of the call: a retried remote refund is not paid twice
    idempotency_key = models.CharField(max_length=200, unique=True)
    approved_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
