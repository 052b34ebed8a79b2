"""What every test that starts real processes (daphne, a qcluster, the host project) needs:
the test database's URL for their environment, and a free port."""

from __future__ import annotations

import socket
from pathlib import Path


def database_url() -> str:
    """pytest-django's test database (the connection's NAME is the test name by now) as a URL."""
    from django.db import connection

    d = connection.settings_dict
    if d["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(d['NAME']).resolve()}"
    auth = d.get("USER") or ""
    if d.get("PASSWORD"):
        auth += f":{d['PASSWORD']}"
    return f"postgres://{auth}@{d.get('HOST') or '127.0.0.1'}:{d.get('PORT') or 5432}/{d['NAME']}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
