"""A person answering in an agent's place (``sessions_app.takeover``, docs/operations.md
"Takeover"): one row per takeover, open while ``ended_at`` is null. At most one open row per
session (a partial unique constraint): a second operator's takeover is refused by the database,
whatever the processes."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import models

#: the trigger notes' ``by``: the model reads them as user text, the chat as a banner
NOTE_BY = "takeover"
#: an operator's messages in the transcript: ``by = PERSON_PREFIX + <their display name>``
PERSON_PREFIX = "person:"
#: what stays of an operator whose data was erased, where their name was (``erasure.actor_forget``)
ERASED_NAME = "an operator (erased)"
#: the notes around a takeover's messages in the transcript, as the model reads them (user text)
BEGIN_NOTE = (
    "[A person, {name}, took over this conversation from you. Until they handed it back, the "
    "assistant replies were theirs, not yours.]"
)
END_NOTE = "[{name}, a person, has handed the conversation back to you.]"
_BEGUN = re.compile(r"\[A person, (.+), took over this conversation from you\.")
_ENDED = re.compile(r"\[(.+), a person, has handed the conversation back to you\.\]")


def note_for_people(text: str) -> str:
    """A takeover note as the chat words it for its user (the archive shows these words, not the
    model's "… took over this conversation from you")."""
    if found := _BEGUN.match(text):
        return f"{found[1]} (a person) has joined the conversation."
    if found := _ENDED.match(text):
        return f"{found[1]} handed the conversation back to the assistant."
    return text


class TakeoverRunning(models.TextChoices):
    """What the takeover did to a turn running when it began."""

    CANCEL = "cancel", "cancelled it"
    FINISH = "finish", "let it finish"


def takeover_files_mark(takeover_id: int) -> str:
    """An ``Attachment.turn_id`` for the files a user sent during takeover ``takeover_id``: sent,
    and by no turn (they join the transcript at the hand back)."""
    return f"takeover-{takeover_id}"


class Takeover(models.Model):
    session = models.ForeignKey("sessions_app.Session", on_delete=models.CASCADE, related_name="takeovers")
    generation = models.IntegerField(default=0)
    operator = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    #: what the user's chat calls the person (their full name, else their login name)
    operator_name = models.CharField(max_length=150)
    running = models.CharField(max_length=8, choices=TakeoverRunning.choices, default=TakeoverRunning.CANCEL)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    #: messages written while it lasted (the user's and the person's)
    messages = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session"], condition=models.Q(ended_at__isnull=True), name="takeover_one_open"
            )
        ]
        indexes = [models.Index(fields=["started_at"], condition=models.Q(ended_at__isnull=True), name="takeover_open")]

    def __str__(self) -> str:
        return f"takeover of session {self.session_id} by {self.operator_name}"
