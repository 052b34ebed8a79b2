"""Data of the demo agent's tools (a real site's agents bring their own models), and attachments."""

import uuid

from django.conf import settings
from django.db import models

from agents_app.attachments import metadata, storage_name


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


# -- proactive turns and inbound channels (sessions_app.proactive.schedules, sessions_app.proactive.channels) ------------

from django_q.models import Schedule as Q2Schedule  # noqa: E402


class AgentSchedule(Q2Schedule):
    """The django-q2 schedules declared by agents (``func = sessions_app.proactive.schedules.fire``), for the
    admin: enable/disable, next run, last run and its turn."""

    class Meta:
        proxy = True
        verbose_name = "agent schedule"

    def __str__(self) -> str:
        # django-q2's own says the task's function (every agent schedule's is the same one)
        return self.name or self.func


class ScheduleRun(models.Model):
    """One row per schedule tick: the uniqueness on (schedule, tick) is what makes a tick start
    exactly one turn when several clusters (or a redelivered task) fire it."""

    schedule = models.CharField(max_length=100)  # the q2 Schedule name: june:<agent>:<name>
    agent = models.CharField(max_length=64)
    tick = models.DateTimeField()
    session_key = models.CharField(max_length=200)
    #: decided before the turn starts, so a redelivered fire() starts the same turn, not a second
    turn_id = models.CharField(max_length=32, unique=True)
    status = models.CharField(max_length=16, default="started")  # started | delivered | failed | skipped
    error = models.TextField(blank=True, default="")
    fired_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-tick"]
        constraints = [models.UniqueConstraint(fields=["schedule", "tick"], name="schedule_run_tick")]

    def __str__(self) -> str:
        return f"{self.schedule} @ {self.tick:%Y-%m-%d %H:%M}"


class DeliveryStatus(models.TextChoices):
    WAITING = "waiting", "waiting for the turn"
    PENDING = "pending", "pending"
    DELIVERING = "delivering", "delivering"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed"


class WebhookDelivery(models.Model):
    """A turn's result POSTed (signed) to the agent's configured URL, with retries."""

    agent = models.CharField(max_length=64)
    session_key = models.CharField(max_length=200)
    turn_id = models.CharField(max_length=32, unique=True)
    url = models.URLField(max_length=500)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.WAITING)
    attempts = models.IntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    response_status = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "updated_at"])]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"delivery of turn {self.turn_id} ({self.status})"


class SeenWebhook(models.Model):
    """Signatures of accepted signed webhooks, kept past the timestamp window: a replay of the
    same signed request hits the unique constraint and is refused."""

    agent = models.CharField(max_length=64)
    signature = models.CharField(max_length=64)
    timestamp = models.BigIntegerField()
    seen_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "signature"], name="seen_webhook_signature")]


# -- attachments (agents_app.attachments; the services: sessions_app.attachment_services) ----------------


def _attachment_path(instance: "Attachment", filename: str) -> str:
    return storage_name(instance.id)


def _new_attachment_id() -> str:
    return uuid.uuid4().hex


class Attachment(models.Model):
    """A file a user attached to a message: its bytes in the default storage (named by the id),
    its sniffed type, size and page count here. Plain fields, no foreign key to sessions_app
    (agents_app never imports it): the session is ``(agent, session_key)``; ``turn_id`` is set
    when a turn takes it (once: an attachment opens one turn). The uploader is a foreign key to
    the user model, so its column takes whatever key that model has (integer, UUID, string)."""

    id = models.CharField(max_length=32, primary_key=True, default=_new_attachment_id, editable=False)
    agent = models.CharField(max_length=64)
    session_key = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    file = models.FileField(upload_to=_attachment_path, max_length=200)
    content_type = models.CharField(max_length=100)
    size = models.BigIntegerField()
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    pages = models.IntegerField(null=True, blank=True)
    turn_id = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["agent", "session_key"]),
            # the sweep of uploads nobody sent (``attachments_sweep_unsent``): the unsent ones
            # only, by age, not every attachment the site ever had
            models.Index(fields=["created_at"], condition=models.Q(turn_id=""), name="attachment_unsent"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.content_type}, {self.size} bytes)"

    def meta(self) -> dict:
        """What the transcript keeps of it (``attachments.metadata``)."""
        return metadata(id=self.id, content_type=self.content_type, name=self.name, size=self.size, pages=self.pages)
