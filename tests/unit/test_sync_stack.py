"""The middleware stack runs synchronously in one thread per request (web/syncstack.py): a
middleware that is async-capable and built on Django's MiddlewareMixin would put two thread
hand-offs per request back into it (its process_request and process_response each go through
``sync_to_async`` under ASGI)."""

import subprocess
import sys

from django.conf import settings
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string


def test_no_middleware_of_the_stack_hands_off_per_request():
    mixins = []
    for path in settings.MIDDLEWARE:
        cls = import_string(path)
        if isinstance(cls, type) and issubclass(cls, MiddlewareMixin) and getattr(cls, "async_capable", False):
            mixins.append(path)
    assert mixins == []


async def test_an_async_view_still_runs_under_the_sync_stack(async_client):
    """Through the ASGI handler (Django's async client): the stack's request half, the view
    and its response half all run."""
    response = await async_client.get("/healthz")
    assert response.status_code == 200
    assert response.headers["X-Frame-Options"] == "DENY"  # the stack's response half ran


def test_warm_imports_the_sdk_an_agent_uses_before_any_turn():
    code = (
        "import os, sys, django\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'june_project.settings'\n"
        "os.environ['JUNE_MODEL'] = 'anthropic'\n"
        "django.setup()\n"
        "from agents_app.providers import warm\n"
        "from sessions_app import wiring\n"
        "assert 'anthropic' not in sys.modules\n"
        "print(warm(wiring.agents().values()), 'anthropic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["['anthropic']", "True"]


def test_a_bad_host_under_the_api_is_json_with_debug_on_too(client, settings):
    """Issue 42's leftover: a Host not in ALLOWED_HOSTS with DEBUG=1 showed Django's HTML page
    under /api/."""
    settings.DEBUG = True
    response = client.get("/api/openapi.json", HTTP_HOST="evil.example")
    assert response.status_code == 400 and response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["code"] == "bad_request"
    page = client.get("/accounts/login/", HTTP_HOST="evil.example")  # elsewhere: Django's own answer
    assert page.status_code == 400
