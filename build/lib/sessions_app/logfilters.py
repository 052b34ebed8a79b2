"""Logging filters the site's LOGGING uses."""

from __future__ import annotations

import logging


class RefusalsOnOneLine(logging.Filter):
    """A refused request (a 4xx: PermissionDenied, Http404, a bad request) is the client's
    mistake, not the server's: Django logs it with the exception's traceback, and a log full of
    tracebacks for 403s hides the real ones. Keep the record (one line: status, path), drop the
    traceback. 5xx records keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and record.exc_info:
            record.exc_info = None
            record.exc_text = None
        return True
