"""Where a turn lives: sessions, turns (submission + lease + journal), the message log, the
steps memo, the durable event log, answers and resets.

Archiving is by generation: a reset moves ``Session.generation`` to a new number and every
live read filters on it, so the archive is the rows of earlier generations and a reset costs
O(1) however large the archive grows. A branch of the conversation (an edited message, a
regenerated reply) is a generation too (``Branch``): the one live at a time is the session's.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from agents_app.runtime import rules
from agents_app.runtime.seams import SessionStatus as RtSessionStatus
from agents_app.runtime.seams import TurnStatus as RtTurnStatus
from sessions_app.models.auditlog import AuditAction, AuditEvent, subject_of  # noqa: F401 (the audit log)
from sessions_app.models.batch_ledger import BatchCall, BatchStatus  # noqa: F401 (Message Batches' ledger)
from sessions_app.models.fields import (  # noqa: F401 (what migrations and the store name)
    EVENT_TYPE_CODES,
    EVENT_TYPE_NAMES,
    HEX_TURN_ID,
    AsTurnRef,
    EventTypeField,
    TextJSONField,
    TurnRefField,
    TurnRefText,
    event_type_code,
    event_type_name,
    turn_of_ref,
    turn_ref,
)
from sessions_app.models.operations import (  # noqa: F401 (the app's models, exported here)
    ApiToken,
    Notification,
    NotificationState,
    QuotaOverride,
    RateCounter,
    WorkerBeat,
    user_keys,
    username_field,
)
from sessions_app.models.takeovers import (  # noqa: F401 (a person answering)
    BEGIN_NOTE,
    END_NOTE,
    ERASED_NAME,
    NOTE_BY,
    PERSON_PREFIX,
    Takeover,
    TakeoverRunning,
    note_for_people,
    takeover_files_mark,
)
from sessions_app.models.totals import UsageTotal  # noqa: F401 (what deleted turns spent)

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
    #: no index of its own: the (owner, -updated_at) index leads with it (a session row written
    #: four times a turn kept an entry in both)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agent_sessions",
        db_index=False,
    )
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
    #: the last generation number handed out: a reset or a new branch takes the next one, so a
    #: number names one generation for good (the processes' transcript caches key on it)
    generation_seq = models.IntegerField(default=0)
    #: kept whatever its agent's retention says, and by an erasure of its owner (docs/privacy.md)
    legal_hold = models.BooleanField(default=False)

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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )  # indexed where set (Meta)
    # subagents (agents_app/runtime/subagents.py): the turn that spawned this one, the parent's
    # step its result goes to, how deep in the tree; ``waiting``: children this turn is parked on
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="children",
        db_index=False,
    )  # indexed where set (Meta)
    spawn_step = models.CharField(max_length=300, blank=True, default="")
    depth = models.IntegerField(default=0)
    waiting = models.IntegerField(default=0)
    #: the position of the turn's first message in its generation, set by the unit that writes
    #: it: the turn's messages are read from there by the message table's key (its folded steps,
    #: ``reads.STEPS``; the guard that records a step once, ``unit_sql.unit_statement``)
    opening = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    #: when a worker first claimed it (``lease.CLAIM``, in the claim's transaction; a retry or a
    #: resumed park keeps the first), and when it ended for good (completed, failed, cancelled:
    #: in the transaction that settled it). NULL while queued / unfinished
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "order"]
        indexes = [
            models.Index(fields=["session", "status", "order"]),
            # the turns of a status, oldest first: the takes (queued), the sweeper (running; its
            # expired leases a filter of those), the dashboard. Not by the lease's expiry: a column
            # in an index makes each write of it a new index entry in every index of the table
            # (no heap-only update), and the take's mark and every heartbeat write it
            models.Index(fields=["status", "created_at"], name="turn_status_created"),
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
            models.Index(
                fields=["created_by", "created_at"],
                condition=models.Q(created_by__isnull=False),
                name="turn_created_by",
            ),
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
        return Message.objects.filter(
            session_id=self.session_id, generation=self.generation, index__gte=self.opening, turn_id=self.pk
        )

    def logged(self) -> models.QuerySet:
        """The events logged under this turn: in its session's log of its generation, by the event
        table's key (a turn logs into its own generation, the live one or its archive)."""
        return Event.objects.filter(session_id=self.session_id, generation=self.generation, turn_id=self.pk)


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
    #: writes it refuses a step the turn's messages already hold (``unit_sql.unit_statement``)
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


class Event(models.Model):
    """The durable event log: every event but deltas, numbered per session."""

    # seq is handed out once per session (a counter on the session row; a branch's copies of the
    # events before its fork point keep theirs); the key also serves "this generation's events
    # after seq N" without scanning the archive. An int4 (2**31 events a
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


class Branch(models.Model):
    """A generation that is a branch of its session's conversation: it holds a copy of its
    parent generation's messages before ``fork_index`` (and the events of their turns), then
    its own. The root of a tree of branches has no parent. ``boundary``/``summary_index``: the
    branch's compaction while another branch is live (the session row holds the live one's)."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="branches", db_index=False)
    generation = models.IntegerField()
    parent_generation = models.IntegerField(null=True, blank=True)
    fork_index = models.IntegerField(default=0)
    boundary = models.IntegerField(default=0)
    summary_index = models.IntegerField(null=True, blank=True)
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "generation"], name="branch_generation")]

    def __str__(self) -> str:
        return f"{self.session_id}#g{self.generation}"


class ApprovalRequest(Turn):
    """A parked turn, as the admin approval inbox lists it."""

    class Meta:
        proxy = True
        verbose_name = "approval request"
        #: the changelist counts them ("3 approval requests"; it read "0 approval inbox"); its
        #: title is "Approval inbox" (``ApprovalRequestAdmin.changelist_view``)
        verbose_name_plural = "approval requests"


class ArchivedSession(Session):
    """A session with its archived generations, as staff browse it in the admin."""

    class Meta:
        proxy = True
        verbose_name = "session archive"
        verbose_name_plural = "session archives"
