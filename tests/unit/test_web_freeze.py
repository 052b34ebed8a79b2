"""The web process freezes what its start-up built (``june_project.asgi``), as the workers do:
a burst of requests makes several full collections, and each walked the whole heap (Django,
the apps, the URLconf's modules, the agents) again. The URLconf is loaded before the freeze,
not at the first request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import gc, sys
import june_project.asgi
frozen = gc.get_freeze_count()
print(frozen, "sessions_app.web.api_turns" in sys.modules)
"""


def test_the_web_process_freezes_its_start_up_heap_with_the_urlconf_loaded():
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "june_project.settings"}
    env.setdefault("SECRET_KEY", "test-web-freeze-0123456789abcdefghijklmnopqrstuvwxyz")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert out.returncode == 0, out.stderr
    frozen, loaded = out.stdout.split()
    assert int(frozen) > 50_000 and loaded == "True"
