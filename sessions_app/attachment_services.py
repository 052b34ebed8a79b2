"""Attachments' services: upload (sniffed, bounded), take for a turn (owner, session, unused),
download (owner only), remove an unsent one, sweep the long unsent, and delete a session's files
with the session.

The bytes go through Django's default storage (``agents_app.attachments``); the rows record who
uploaded what for which session. A turn takes its attachments with a conditional ``UPDATE …
WHERE turn_id = ''``: an attachment opens exactly one turn, and a refused start gives them back.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from agents_app import attachments as files
from agents_app.models import Attachment
from agents_app.runtime.errors import NotFound, TurnConflictError
from sessions_app.site_errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

log = logging.getLogger(__name__)

#: unsent uploads one user may keep, all sessions together, in messages' worth (a composer's
#: chips, with slack): what bounds the storage of files nobody sends
UNSENT_FACTOR = 4
TOO_MANY = "too many unsent attachments: send or remove some first (GET/DELETE …/api/attachments/unsent)"
#: bytes a multipart body may have beyond its files (boundaries, headers, the text field)
MULTIPART_SLACK = 64 * 1024 + 4 * 32_000


def max_body_bytes(files_count: int | None = None) -> int:
    """The largest request body worth parsing for ``files_count`` files (default: a message's
    worth): a larger declared Content-Length is refused (413) before a byte is spooled."""
    count = settings.JUNE_ATTACHMENTS_PER_MESSAGE if files_count is None else files_count
    return settings.JUNE_ATTACHMENT_MAX_BYTES * count + MULTIPART_SLACK


def check_count(count: int) -> None:
    limit = settings.JUNE_ATTACHMENTS_PER_MESSAGE
    if count > limit:
        raise PayloadTooLarge(f"at most {limit} attachments per message")


def parse_ids(value: Any) -> list[str]:
    """``attachments`` of a start (API body, websocket frame): a list of distinct ids."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest("attachments must be a list of attachment ids")
    check_count(len(value))
    if len(set(value)) != len(value):
        raise BadRequest("attachments lists an id twice")
    for v in value:
        if not files.ID_RE.fullmatch(v):
            raise NotFound(f"no attachment {v[:40]!r}")
    return value


def attachment_upload(*, agent: str, key: str, user: Any, upload: Any) -> Attachment:
    """Store one uploaded file for ``user`` in the session (the caller checked it is theirs, or
    new: the first message creates it, an upload does not). 413 over the size limit, 415 unless
    its bytes are a PNG, JPEG, GIF, WebP or PDF (whatever its name or declared type says)."""
    limit = settings.JUNE_ATTACHMENT_MAX_BYTES
    if upload.size is None or upload.size > limit:
        raise PayloadTooLarge(f"an attachment is at most {limit:,} bytes")
    upload.seek(0)
    data = upload.read(limit + 1)
    content_type = checked_type(data)
    cap = settings.JUNE_ATTACHMENTS_PER_MESSAGE * UNSENT_FACTOR
    if Attachment.objects.filter(owner_id=user.pk, turn_id="").count() >= cap:  # the cheap refusal
        raise PayloadTooLarge(TOO_MANY)
    row = _new_row(agent, key, user.pk, data, getattr(upload, "name", ""), content_type)
    try:
        _insert_within_cap(row, user, cap)
    except BaseException:
        _delete_file(row.file.name)
        raise
    return row


def checked_type(data: bytes) -> str:
    """The type an attachment's bytes are: 413 over the size limit, 415 unless a PNG, JPEG, GIF,
    WebP or PDF (whatever a name or a declared type says)."""
    limit = settings.JUNE_ATTACHMENT_MAX_BYTES
    if len(data) > limit:
        raise PayloadTooLarge(f"an attachment is at most {limit:,} bytes")
    content_type = files.sniff(data[:16])
    if content_type is None:
        raise UnsupportedMediaType("attachments must be PNG, JPEG, GIF, WebP or PDF files")
    return content_type


def _new_row(agent: str, key: str, owner_id: Any, data: bytes, name: str, content_type: str) -> Attachment:
    """An unsaved row, its file stored (the caller inserts the row, or deletes the file)."""
    row = Attachment(
        agent=agent,
        session_key=key,
        owner_id=owner_id,
        content_type=content_type,
        size=len(data),
        name=files.clean_name(name, content_type),
        sha256=hashlib.sha256(data).hexdigest(),
        pages=files.pdf_pages(data) if content_type == files.PDF_TYPE else None,
    )
    row.file.save(row.id, ContentFile(data), save=False)
    return row


def attachment_store(*, agent: str, key: str, data: bytes, name: str) -> Attachment:
    """A file no person uploaded (an eval case's), stored for the session as an upload is and
    owned by nobody: the turn started with no user (``turn_start(attachments=[id])``) takes it.
    Checked as an upload is (``checked_type``). Its file goes when its row is deleted; a caller
    whose transaction rolls back deletes it (``attachment_file_delete``)."""
    row = _new_row(agent, key, None, data, name, checked_type(data))
    try:
        row.save(force_insert=True)
    except BaseException:
        _delete_file(row.file.name)
        raise
    return row


def attachment_file_delete(name: str) -> None:
    """Delete a stored file whose row never committed (a rolled back ``attachment_store``)."""
    _delete_file(name)


def _insert_within_cap(row: Attachment, user: Any, cap: int) -> None:
    """Insert ``row`` unless its owner would then hold more than ``cap`` unsent uploads, as one
    step for concurrent uploads in any process: on PostgreSQL the owner's user row is locked
    first (uploads of one user queue here, nobody else's); on SQLite the INSERT comes first and
    takes the database's one write lock, so the count after it sees every other writer's commit
    and none can write until this transaction ends. Over the cap, the transaction rolls back."""
    with transaction.atomic():
        if connection_vendor() != "sqlite":
            list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True))
        row.save(force_insert=True)
        if Attachment.objects.filter(owner_id=user.pk, turn_id="").count() > cap:
            raise PayloadTooLarge(TOO_MANY)


def connection_vendor() -> str:
    return transaction.get_connection().vendor


def attachments_discard(*, user: Any, ids: list[str]) -> int:
    """Delete ``user``'s uploads among ``ids`` that no turn took: what a refused multipart start
    uploaded (a refused request leaves nothing); a taken one stays with its turn."""
    if not ids:
        return 0
    return Attachment.objects.filter(id__in=ids, owner_id=getattr(user, "pk", None), turn_id="").delete()[0]


def attachments_unsent(*, user: Any) -> list[dict[str, Any]]:
    """``user``'s unsent uploads, every session, newest first (what counts against the cap)."""
    rows = Attachment.objects.filter(owner_id=getattr(user, "pk", None), turn_id="").order_by("-created_at", "id")
    return [
        {**r.meta(), "agent": r.agent, "session": r.session_key, "created_at": r.created_at.isoformat()}
        for r in rows[: settings.JUNE_ATTACHMENTS_PER_MESSAGE * UNSENT_FACTOR * 2]
    ]


def attachments_remove_unsent(*, user: Any) -> int:
    """Delete every unsent upload of ``user`` (their files after the commit)."""
    return Attachment.objects.filter(owner_id=getattr(user, "pk", None), turn_id="").delete()[0]


def attachments_take(*, agent: str, key: str, user: Any, ids: list[str], turn_id: str) -> tuple[dict[str, Any], ...]:
    """Mark ``ids`` (``user``'s unsent uploads to this session) as the turn's, and return their
    metadata in the order given. 404 for an id that is not theirs, 409 for one already sent."""
    if not ids:
        return ()
    owner = getattr(user, "pk", None)
    rows = {r.id: r for r in Attachment.objects.filter(id__in=ids, agent=agent, session_key=key, owner_id=owner)}
    for missing in (i for i in ids if i not in rows):
        raise NotFound(f"no attachment {missing!r} in this session")
    taken = Attachment.objects.filter(id__in=ids, turn_id="").update(turn_id=turn_id)
    if taken != len(ids):
        attachments_release(turn_id=turn_id)
        raise TurnConflictError("an attachment was already sent with another message")
    return tuple(rows[i].meta() for i in ids)


def attachments_release(*, turn_id: str) -> None:
    """Give a refused start's attachments back (unsent again)."""
    Attachment.objects.filter(turn_id=turn_id).update(turn_id="")


def attachment_for_user(*, agent: str, key: str, attachment_id: str, user: Any) -> Attachment:
    """The attachment if ``user`` uploaded it to this session (staff too, for the admin's
    archive); a 404 for anyone else, never a hint that it exists."""
    row = None
    if files.ID_RE.fullmatch(attachment_id or ""):
        row = Attachment.objects.filter(id=attachment_id, agent=agent, session_key=key).first()
    if row is None or (row.owner_id != getattr(user, "pk", None) and not getattr(user, "is_staff", False)):
        raise NotFound("no such attachment")
    return row


def attachment_remove(*, agent: str, key: str, attachment_id: str, user: Any) -> None:
    """Delete an unsent upload of ``user`` (the composer's ×); a sent one stays with its message."""
    row = attachment_for_user(agent=agent, key=key, attachment_id=attachment_id, user=user)
    if row.owner_id != getattr(user, "pk", None):
        raise NotFound("no such attachment")
    if Attachment.objects.filter(id=row.id, turn_id="").delete()[0] == 0:  # its file: on_attachment_deleted
        raise TurnConflictError("this attachment was sent with a message: it stays with it")


def attachments_sweep_unsent(*, older_than_hours: float | None = None) -> int:
    """Delete the uploads nobody sent within ``JUNE_UNSENT_ATTACHMENT_HOURS`` (a composer closed
    with its chips, an API client that uploaded and went away): the rows now, the files after the
    commit. The sweeper runs it; a later start naming one gets a 404 like any unknown id."""
    hours = settings.JUNE_UNSENT_ATTACHMENT_HOURS if older_than_hours is None else older_than_hours
    cutoff = timezone.now() - timedelta(hours=hours)
    return Attachment.objects.filter(turn_id="", created_at__lt=cutoff).delete()[0]


def attachments_delete(*, agent: str, key: str) -> int:
    """Delete a session's attachments (a session deleted in the admin; a reset keeps them, for
    the archive): the rows now, each file after the commit (``on_attachment_deleted``)."""
    return Attachment.objects.filter(agent=agent, session_key=key).delete()[0]


def _delete_file(name: str) -> None:
    try:
        default_storage.delete(name)
    except Exception:  # a storage that is down: the row is gone, the file is an orphan to sweep
        log.warning("could not delete attachment file %s", name, exc_info=True)


def on_attachment_deleted(sender: Any, instance: Attachment, **kwargs: Any) -> None:
    """``post_delete`` of ``Attachment``, however it was deleted (a session's deletion, the
    composer's x, the admin): its file goes once the deletion commits (a rollback keeps it)."""
    name = instance.file.name
    if name:
        transaction.on_commit(lambda: _delete_file(name))


def on_session_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_delete`` of ``Session``: its attachments go with it."""
    attachments_delete(agent=instance.agent, key=instance.key)
