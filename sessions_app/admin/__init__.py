"""Admin: each area lives in its own module (sessions and archives, the approval inbox,
schedules, limits); this file only imports them so their registrations run."""

from sessions_app.admin import (  # noqa: F401
    attachments_admin,
    audit_log,
    inbox,
    limits_admin,
    notifications,
    proactive_admin,
    queue_admin,
    sessions,
    tokens,
    turns,
)
