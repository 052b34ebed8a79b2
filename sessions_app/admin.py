"""Admin: each area lives in its own module (sessions and archives, the approval inbox,
schedules); this file only imports them so their registrations run."""

from . import admin_inbox, admin_sessions, admin_tokens  # noqa: F401
