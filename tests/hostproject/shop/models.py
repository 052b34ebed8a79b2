from django.db import models


class Purchase(models.Model):
    """The host's own table, written by its agent's ``def`` tool in the step's transaction."""

    item = models.CharField(max_length=200)
    quantity = models.PositiveIntegerField(default=1)
    turn_id = models.CharField(max_length=64)
    call_id = models.CharField(max_length=200, unique=True)
