"""Where a turn lives: sessions, turns (submission + lease + journal), the message log, the
steps memo, the durable event log, answers and resets.

Archiving is by generation: a reset bumps ``Session.generation`` and every live read filters
on it, so the archive is the rows of earlier generations and a reset costs O(1) however large
the archive grows.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from django import forms
from django.conf import settings
from django.db import models

from agents_app.runtime import rules
from agents_app.runtime.seams import SessionStatus as RtSessionStatus
from agents_app.runtime.seams import TurnStatus as RtTurnStatus

#: as the store writes them out (``checkpoint.IN_CHAIN``): SQLite takes a partial index for a
#: query whose terms are its condition's own
CHAIN_BLOCKING = sorted(str(s) for s in rules.CHAIN_BLOCKING)


class SessionStatus(models.TextChoices):
    NEW = RtSessionStatus.NEW.value, "new"
    IDLE = RtSessionStatus.IDLE.value, "idle"
    RUNNING = RtSessionStatus.RUNNING.value, "running"
    SUSPENDED = RtSessionStatus.SUSPENDED.value, "suspended"


class TurnStatus(models.TextChoices):
    QUEUED = RtTurnStatus.QUEUED.value, "queued"
    RUNNING = RtTurnStatus.RUNNING.value, "running"
    SUSPENDED = RtTurnStatus.SUSPENDED.value, "suspended"
    COMPLETED = RtTurnStatus.COMPLETED.value, "completed"
    FAILED = RtTurnStatus.FAILED.value, "failed"
    CANCELLED = RtTurnStatus.CANCELLED.value, "cancelled"


class Session(models.Model):
    agent = models.CharField(max_length=64)
    key = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="agent_sessions")
    title = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=SessionStatus.choices, default=SessionStatus.NEW)
    generation = models.IntegerField(default=0)
    #: last event sequence number handed out (per session, across generations)
    event_seq = models.BigIntegerField(default=0)
    #: turns started so far: a turn's ``order`` in its session's chain
    turn_seq = models.BigIntegerField(default=0)
    #: compaction, for the live generation: the model sees the summary message at
    #: ``summary_index``, then the messages from ``boundary`` on (a reset sets both back)
    boundary = models.IntegerField(default=0)
    summary_index = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "key"], name="session_agent_key")]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return f"{self.agent}/{self.key}"


class Turn(models.Model):
    id = models.CharField(max_length=32, primary_key=True)
    #: no index of its own: the (session, status, order) index leads with it
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns", db_index=False)
    #: position in the session's turn chain (turns of a session run one at a time, in order)
    order = models.BigIntegerField(default=0)
    generation = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=TurnStatus.choices, default=TurnStatus.QUEUED)
    kind = models.CharField(max_length=16, default="inbound")
    source = models.CharField(max_length=32, blank=True, default="")
    input = models.JSONField(default=dict)
    policy = models.JSONField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=16, null=True, blank=True)
    # lease: who drives it and until when (epoch seconds, from the injected clock)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.FloatField(null=True, blank=True)
    attempt_id = models.CharField(max_length=32, null=True, blank=True)
    revision = models.IntegerField(default=0)
    attempts = models.IntegerField(default=0)
    # the journal (the durable envelope, docs/workers.md)
    phase = models.CharField(max_length=32, null=True, blank=True)
    journal = models.JSONField(default=dict, blank=True)
    pending = models.JSONField(null=True, blank=True)
    text = models.TextField(blank=True, default="")
    error = models.JSONField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", db_index=False)  # indexed where set (Meta)
    # subagents (agents_app/runtime/subagents.py): the turn that spawned this one, the parent's
    # step its result goes to, how deep in the tree; ``waiting``: children this turn is parked on
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
                               related_name="children", db_index=False)  # indexed where set (Meta)
    spawn_step = models.CharField(max_length=300, blank=True, default="")
    depth = models.IntegerField(default=0)
    waiting = models.IntegerField(default=0)
    #: the position of the turn's first message in its generation, set by the unit that writes
    #: it: the turn's messages are read from there by the message table's key (its folded steps,
    #: ``reads.STEPS``; the guard that records a step once, ``checkpoint.STEP_GUARD``)
    opening = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["session", "order"]
        indexes = [
            models.Index(fields=["session", "status", "order"]),
            models.Index(fields=["status", "lease_expires_at"]),
            # a session's parents parked on children (few): the session status reads it per change
            models.Index(fields=["session"], condition=models.Q(waiting__gt=0), name="turn_waiting"),
            # a session's unfinished turns, its chain (few, however many it ran): the claim, the
            # hand-off, the status recompute read it per step (``checkpoint.IN_CHAIN``)
            models.Index(fields=["session", "order"], condition=models.Q(status__in=CHAIN_BLOCKING), name="turn_chain"),
            # only the turns that have one (a child; a turn a user started): a turn without a
            # parent or a creator writes no entry there (a lookup by a value, ``=`` or ``IN``,
            # still uses them)
            models.Index(fields=["parent"], condition=models.Q(parent__isnull=False), name="turn_parent"),
            # by creation time too: a user's turns of today are what their daily token quota reads
            models.Index(fields=["created_by", "created_at"], condition=models.Q(created_by__isnull=False),
                         name="turn_created_by"),
            # every turn of today: what an agent's daily token quota reads (``quotas``)
            models.Index(fields=["created_at"], name="turn_created_at"),
        ]

    def __str__(self) -> str:
        return f"turn {self.id} ({self.status})"

    def written(self) -> models.QuerySet:
        """The messages this turn wrote: from its opening on, by the message table's key (no
        index holds a message's turn)."""
        if self.opening is None:
            return Message.objects.none()
        return Message.objects.filter(session_id=self.session_id, generation=self.generation,
                                      index__gte=self.opening, turn_id=self.pk)

    def logged(self) -> models.QuerySet:
        """The events logged under this turn: in its session's log of its generation, by the event
        table's key (a turn logs into its own generation, the live one or its archive)."""
        return Event.objects.filter(session_id=self.session_id, generation=self.generation, turn_id=self.pk)


class TextJSONField(models.JSONField):
    """JSON kept as its text on PostgreSQL too (``json``, not ``jsonb``): a small message's
    JSON costs its length, not jsonb's header per key and value (a third more). Nothing queries
    inside it (``?`` and ``@>`` are jsonb's); the transcript reads cast it where they merge it
    (``reads.WHOLE_PG``)."""

    def db_type(self, connection):
        return "json" if connection.vendor == "postgresql" else super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        if value is not None and not isinstance(value, (str, bytes, bytearray)):  # the driver decoded json
            return value
        return super().from_db_value(value, expression, connection)


#: a turn id as the site makes them (``new_turn_id``) and as a child's is derived: 32 hex digits
HEX_TURN_ID = re.compile(r"[0-9a-f]{32}")


def turn_ref(turn_id: str) -> bytes:
    """A turn id as ``TurnRefField`` stores it on PostgreSQL: an id of 32 lowercase hex digits
    (every id the site makes) as its 16 bytes, any other id as its UTF-8 after 0xff, twice when
    that would make 16 bytes (16 bytes are a hex id's alone; UTF-8 has no 0xff). The migration
    that made the column (0019) defines the same in SQL: ``june_tid(text)``, ``june_tid_text(bytea)``."""
    if len(turn_id) == 32 and HEX_TURN_ID.fullmatch(turn_id):
        return bytes.fromhex(turn_id)
    raw = turn_id.encode()
    return (b"\xff\xff" if len(raw) == 15 else b"\xff") + raw


def turn_of_ref(ref: bytes | memoryview) -> str:
    """``turn_ref``'s inverse."""
    ref = bytes(ref)
    return ref.hex() if len(ref) == 16 else ref.lstrip(b"\xff").decode()


class TurnRefField(models.CharField):
    """The turn a message or an event row belongs to: its id, a string in Python (filters,
    ``values_list``, the admin), stored on PostgreSQL as ``turn_ref``'s bytes: 17 bytes a row
    where the id's text took 33, in every message and event row. No foreign key: nothing joins
    these rows to their turn, and a turn's rows are found by position (``Turn.opening``) or by
    session. SQLite stores the id's text (its rows are already small)."""

    description = "turn id (16 bytes on PostgreSQL)"

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_length", 32)
        super().__init__(*args, **kwargs)

    def db_type(self, connection):
        return "bytea" if connection.vendor == "postgresql" else super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        value = super().get_db_prep_value(value, connection, prepared)
        if value is None or connection.vendor != "postgresql" or hasattr(value, "resolve_expression"):
            return value
        return turn_ref(value)

    def from_db_value(self, value, expression, connection):
        return turn_of_ref(value) if isinstance(value, (bytes, memoryview)) else value


class AsTurnRef(models.Func):
    """A turn id expression (``OuterRef("pk")`` of a turn) as a ``TurnRefField`` column compares
    with it: ``june_tid(...)`` on PostgreSQL, the text itself elsewhere."""

    function = "june_tid"
    arity = 1

    def __init__(self, expression, **extra):
        super().__init__(expression, output_field=TurnRefField(), **extra)

    def as_sql(self, compiler, connection, **extra):
        return compiler.compile(self.source_expressions[0])

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, **extra)


class TurnRefText(models.Func):
    """A ``TurnRefField`` column as the turn id's text (``june_tid_text(...)`` on PostgreSQL),
    for a query whose column must be text: a UNION with a foreign key to a turn."""

    function = "june_tid_text"
    arity = 1

    def __init__(self, expression, **extra):
        super().__init__(expression, output_field=models.CharField(), **extra)

    def as_sql(self, compiler, connection, **extra):
        return compiler.compile(self.source_expressions[0])

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, **extra)


class Message(models.Model):
    # keyed by its position: no surrogate id, and no index but the key's ((session, generation,
    # index) serves every read, a turn's messages from ``Turn.opening`` on included)
    pk = models.CompositePrimaryKey("session", "generation", "index")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages", db_index=False)
    generation = models.IntegerField(default=0)
    index = models.IntegerField()
    #: the turn that wrote it (the message's own turn id is in ``data`` when it differs)
    turn_id = TurnRefField(null=True, blank=True)
    role = models.CharField(max_length=16)
    data = TextJSONField()
    #: the step memo's key of the unit that wrote this message, when the step points at it
    #: (``model:<n>``, ``tool:<n>:<call_id>``): the step is recorded in the same row as its result,
    #: not in a Step row of its own (``checkpoint.folded``). Recorded once: the checkpoint that
    #: writes it refuses a step the turn's messages already hold (``checkpoint.STEP_GUARD``)
    step = models.CharField(max_length=300, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "generation", "index"]


class Step(models.Model):
    """The steps memo's rows that hold data or point at no message of their unit:
    ``input:<turn>:<id>`` holds a human answer in ``data``, ``compact:...`` a compaction's cut.
    A step that points at a message its unit wrote (``model:<n>``, ``tool:<n>:<call_id>``) is
    that message's ``step`` column instead."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="steps", db_index=False)
    key = models.CharField(max_length=300)
    message_index = models.IntegerField(null=True, blank=True)
    data = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["turn", "key"], name="step_key")]


#: an event type's code in ``Event.type`` (the runtime's closed set, ``events.EVENT_TYPES``).
#: Written out, never renumbered: a code is what the rows already hold. A new type takes the
#: next number; a type the runtime drops keeps its code, unused.
EVENT_TYPE_CODES: dict[str, int] = {
    "turn.started": 1,
    "reasoning.delta": 2,
    "message.delta": 3,
    "message.completed": 4,
    "action.requested": 5,
    "action.completed": 6,
    "input.requested": 7,
    "input.answered": 8,
    "child.started": 9,
    "turn.completed": 10,
    "turn.failed": 11,
    "turn.cancelled": 12,
    "session.reset": 13,
    "compaction.started": 14,
    "compaction.completed": 15,
    "compaction.failed": 16,
}
EVENT_TYPE_NAMES: dict[int, str] = {code: name for name, code in EVENT_TYPE_CODES.items()}
assert len(EVENT_TYPE_NAMES) == len(EVENT_TYPE_CODES), "two event types share a code"


def event_type_code(name: str) -> int:
    """The code an event type is stored as; a type with none is a bug, refused at write time
    (never stored as a code that reads back as something else)."""
    try:
        return EVENT_TYPE_CODES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown event type {name!r}: give it a code in models.EVENT_TYPE_CODES") from None


def event_type_name(code: int) -> str:
    try:
        return EVENT_TYPE_NAMES[code]
    except KeyError:
        raise ValueError(f"unknown event type code {code!r} (written by a newer EVENT_TYPE_CODES?)") from None


class EventTypeField(models.SmallIntegerField):
    """An event's type: a string in Python (filters, ``values_list``, the admin), a smallint
    code in the database (``EVENT_TYPE_CODES``): 2 bytes a row where the name took up to 21.
    The raw SQL that writes events converts with ``event_type_code``."""

    description = "event type (stored as a smallint code)"

    @property
    def validators(self):  # IntegerField's range validators compare numbers; this holds names
        return list(self._validators)

    def get_prep_value(self, value):
        if value is None or hasattr(value, "resolve_expression"):
            return value
        return event_type_code(value)

    def from_db_value(self, value, expression, connection):
        return None if value is None else event_type_name(value)

    def to_python(self, value):
        if value is None or isinstance(value, str):
            return value
        return event_type_name(value)

    def get_internal_type(self):
        return "SmallIntegerField"

    def formfield(self, **kwargs):  # a name, not IntegerField's number input
        return models.Field.formfield(self, **{"form_class": forms.CharField, **kwargs})


class Event(models.Model):
    """The durable event log: every event but deltas, numbered per session."""

    # seq is unique per session (a counter on the session row); the key also serves "this
    # generation's events after seq N" without scanning the archive. An int4 (2**31 events a
    # session, as a generation's message index): 8 bytes less a row and a key entry than an int8
    pk = models.CompositePrimaryKey("session", "generation", "seq")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events", db_index=False)
    generation = models.IntegerField(default=0)
    seq = models.IntegerField()
    turn_id = TurnRefField(null=True, blank=True)
    type = EventTypeField()
    #: mostly a reference to a message (``store.eventlog``): text, as a message's (``TextJSONField``)
    data = TextJSONField()
    #: NULL for an event that refers to a message: committed with it, at its ``created_at``
    #: (``store.eventlog.timed``)
    created_at = models.DateTimeField(auto_now_add=True, null=True)

    class Meta:
        ordering = ["session", "seq"]


class Answer(models.Model):
    """Every answer to a parked request: who, when, what, from where."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="answers")
    input_id = models.CharField(max_length=200)
    answer = models.JSONField(null=True)
    by = models.CharField(max_length=200, null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    via = models.CharField(max_length=32, default="api")
    remote_addr = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)


class SessionReset(models.Model):
    """A reset: which generation was archived, by whom, when."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="resets")
    generation = models.IntegerField()
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    @property
    def archived_session(self) -> str:
        return f"{self.session.key}#g{self.generation}"


class RateCounter(models.Model):
    """How many turns a subject started in one window (``sessions_app.quotas``): a row per
    (scope, subject, window), counted by one conditional upsert, so no race admits one over the
    limit and the count holds across processes, sites and restarts. Rows of past windows are
    deleted as new windows open."""

    scope = models.CharField(max_length=32)  # user | webhook | schedule
    subject = models.CharField(max_length=200)  # a user's pk, an agent's name, a schedule's name
    window_start = models.BigIntegerField()  # epoch seconds
    n = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "subject", "window_start"], name="rate_counter_key")]
        indexes = [models.Index(fields=["window_start"], name="rate_counter_window")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.subject}@{self.window_start} = {self.n}"


class QuotaOverride(models.Model):
    """A user's or a group's own limits, over the site's settings (``sessions_app.quotas``),
    edited in the admin. Blank: the setting; 0: no limit. A user's own row wins over their
    groups'; among their groups, the most generous limit."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="+")
    group = models.OneToOneField("auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    turns_per_minute = models.PositiveIntegerField(null=True, blank=True,
                                                   help_text="blank: JUNE_RATE_TURNS_PER_MINUTE; 0: no limit")
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True,
                                                    help_text="blank: JUNE_QUOTA_TOKENS_PER_DAY; 0: no limit")
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(
            condition=models.Q(user__isnull=False, group__isnull=True) | models.Q(user__isnull=True, group__isnull=False),
            name="quota_override_user_or_group", violation_error_message="Choose a user or a group (one, not both).")]

    def __str__(self) -> str:
        return f"limits of {self.user or self.group}"


class ApiToken(models.Model):
    """A bearer token for the HTTP API; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "") -> tuple["ApiToken", str]:
        raw = "june_" + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, name=name, prefix=raw[:12], key_hash=cls.hash(raw)), raw


class ApprovalRequest(Turn):
    """A parked turn, as the admin approval inbox lists it."""

    class Meta:
        proxy = True
        verbose_name = "approval request"
        verbose_name_plural = "approval inbox"


class ArchivedSession(Session):
    """A session with its archived generations, as staff browse it in the admin."""

    class Meta:
        proxy = True
        verbose_name = "session archive"
        verbose_name_plural = "session archives"


class WorkerBeat(models.Model):
    """A worker process's worker beat, its liveness (``sessions_app.workers.beat``): written every
    ``JUNE_WORKER_BEAT_SECONDS`` from its runner's event loop, deleted when it stops cleanly. A
    row not seen for ``BEATS_MISSED`` beats is a worker gone (killed, frozen, or its loop held)."""

    #: ``host:pid``, as a lease's owner names the worker that holds it
    id = models.CharField(primary_key=True, max_length=300)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()
    #: the turns its runner drives now, and the most it drives at once (``JUNE_TURNS_PER_WORKER``)
    running = models.PositiveIntegerField(default=0)
    slots = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "worker heartbeat"


def username_field() -> str:
    """The user model's login name field (``username``, or a custom model's ``USERNAME_FIELD``):
    June looks users up and searches them by it, never by a field name of its own choosing."""
    from django.contrib.auth import get_user_model

    return get_user_model().USERNAME_FIELD


class NotificationState(models.TextChoices):
    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    FAILED = "failed", "failed"  # given up after JUNE_NOTIFY_MAX_ATTEMPTS
    SKIPPED = "skipped", "skipped"  # its park was answered before it went out
    HELD = "held", "held"  # a failure waiting for its digest


class Notification(models.Model):
    """A notification's outbox row (``sessions_app.notify``): written by the park sweep (once
    per park, ``key`` unique), sent by the sender with backoff, its state visible in the admin."""

    key = models.CharField(max_length=300, unique=True)
    kind = models.CharField(max_length=16)  # park | reminder | failure | digest
    channel = models.CharField(max_length=16)  # email | webhook
    turn_id = models.CharField(max_length=32, blank=True, default="")
    input_id = models.CharField(max_length=200, blank=True, default="")
    recipients = models.JSONField(default=list, blank=True)
    subject = models.CharField(max_length=300, blank=True, default="")
    body = models.TextField(blank=True, default="")
    state = models.CharField(max_length=16, choices=NotificationState.choices, default=NotificationState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["state", "next_at"], name="notification_due")]
