"""The ledger of model calls sent through the Message Batches API (``sessions_app.workers.batch_poller``,
docs/providers.md "Message Batches"): one row per request, written before anything is sent, so a
crash never sends a request twice and never loses its answer.

A row's life: ``intent`` (the turn's model step wrote it, with the request, and parked the turn)
→ ``submitting`` (a poller took it; its ``submitted_at`` is written before ``create``) →
``submitted`` (the batch's id checkpointed) → ``done`` (its message) or ``failed`` (errored,
expired, canceled). A poller that died between ``create`` and the checkpoint leaves rows
``submitting``: the next finds the batches created since (``recovering``, ``candidates``) and
reads their results for the rows' custom ids before it sends anything again. ``delivered``: the
parked turn was queued again (or is gone). The request holds the conversation: the row is
deleted with its turn."""

from __future__ import annotations

from django.db import models


class BatchStatus(models.TextChoices):
    INTENT = "intent"
    SUBMITTING = "submitting"
    SUBMITTED = "submitted"
    RECOVERING = "recovering"
    DONE = "done"
    FAILED = "failed"


class BatchCall(models.Model):
    #: the request's ``custom_id`` in its batch (``^[A-Za-z0-9_-]{1,64}$``): the key and the try
    custom_id = models.CharField(max_length=64, primary_key=True)
    #: ``<turn id>:<step id>`` (``ModelRequest.batch_key``); ``attempt``: 1 for its first request,
    #: one more after each failed one (each failure spends one of the turn's attempts)
    key = models.CharField(max_length=120)
    attempt = models.IntegerField(default=1)
    turn = models.ForeignKey("sessions_app.Turn", on_delete=models.CASCADE, related_name="+", db_index=False)
    agent = models.CharField(max_length=100)
    params = models.JSONField()
    status = models.CharField(max_length=16, choices=BatchStatus.choices, default=BatchStatus.INTENT)
    batch_id = models.CharField(max_length=100, blank=True, default="")
    #: recovering: the batches created since the row was taken, one of which may hold it
    candidates = models.JSONField(default=list, blank=True)
    #: the poller's claim (``submitting``) and when it was taken (epoch seconds)
    token = models.CharField(max_length=32, blank=True, default="")
    submitted_at = models.FloatField(null=True, blank=True)
    #: done: the API's message; failed: why
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    delivered = models.BooleanField(default=False)
    #: failed, and the turn's step was told (it spent an attempt and asks again)
    reported = models.BooleanField(default=False)
    created_at = models.FloatField()

    class Meta:
        indexes = [
            models.Index(fields=["key", "attempt"], name="batchcall_key"),
            models.Index(fields=["turn"], name="batchcall_turn"),
            # the poller's queries: what to send, to check, to deliver
            models.Index(fields=["status", "created_at"], name="batchcall_open", condition=~models.Q(delivered=True)),
        ]
