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


def _printed(code: str) -> list[str]:
    """The words ``code`` prints, run in a fresh interpreter (nothing imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


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
    assert _printed(code)[-2:] == ["['anthropic']", "True"]


def test_warm_imports_the_mcp_sdk_when_an_agent_has_an_mcp_server():
    """Imported on a worker's loop at its first call, the SDK held every turn of the process
    (and its lease's heartbeat) for seconds on a busy machine: a turn lost its lease mid-call."""
    code = (
        "import os, sys, django\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'june_project.settings'\n"
        "os.environ['JUNE_DEMO_MCP'] = '1'\n"
        "django.setup()\n"
        "from agents_app import mcp\n"
        "from sessions_app import wiring\n"
        "agents = list(wiring.agents().values())\n"
        "assert 'mcp.client.session' not in sys.modules\n"
        "print(mcp.warm([a for a in agents if not a.sources]), 'mcp.client.session' in sys.modules)\n"
        "print(mcp.warm(agents), 'mcp.client.session' in sys.modules)\n"
    )
    assert _printed(code)[-4:] == ["False", "False", "True", "True"]  # the demo's ops agent has one


def test_a_bad_host_under_the_api_is_json_with_debug_on_too(client, settings):
    """Issue 42's leftover: a Host not in ALLOWED_HOSTS with DEBUG=1 showed Django's HTML page
    under /api/."""
    settings.DEBUG = True
    response = client.get("/api/openapi.json", HTTP_HOST="evil.example")
    assert response.status_code == 400 and response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["code"] == "bad_request"
    page = client.get("/accounts/login/", HTTP_HOST="evil.example")  # elsewhere: Django's own answer
    assert page.status_code == 400


async def test_a_sync_view_runs_on_the_thread_of_the_stack_with_no_hop_back(monkeypatch):
    """``june.asgi.one_hop``: the whole chain is synchronous, entered once; a sync view under it
    goes back to no event loop (Django's own chain has an async bottom: two more trips through
    the server's loop per request)."""
    from asgiref.sync import AsyncToSync
    from asgiref.testing import ApplicationCommunicator
    from django.core.handlers.asgi import ASGIHandler

    from june.asgi import one_hop

    app = one_hop(ASGIHandler())
    assert app.june_one_hop and one_hop(app) is app
    hops = []
    real = AsyncToSync.__call__
    monkeypatch.setattr(AsyncToSync, "__call__", lambda self, *a, **k: hops.append(self) or real(self, *a, **k))
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/openapi.json",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "server": ("testserver", 80),
    }
    comm = ApplicationCommunicator(app, scope)
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await comm.receive_output(30)
    assert start["status"] == 200
    assert hops == []


def test_a_coroutine_that_never_suspends_runs_here_and_one_that_does_is_refused():
    import asyncio

    import pytest

    from sessions_app.store.threads import inline, run_here

    async def plain():
        return await inline(lambda x: x + 1)(1)

    assert run_here(plain()) == 2

    async def sleeps():
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)  # a real wait: a future the loop would resolve

    with pytest.raises(RuntimeError, match="suspends"):
        run_here(sleeps())


def test_a_start_runs_the_host_call_on_its_own_thread_and_a_replace_on_a_loop(monkeypatch, django_user_model, db):
    """``services._host_call(inline=True)``: a start (no replace) awaits only the store's
    database calls, made where they are awaited; a replace publishes the cancels it logged, on
    an event loop (``async_to_sync``) as every other host call."""
    from sessions_app import models as m
    from sessions_app import services

    hops = []
    real = services.async_to_sync
    monkeypatch.setattr(services, "async_to_sync", lambda fn: hops.append(fn) or real(fn))
    user = django_user_model.objects.create_user("ann")
    first = services.turn_start(agent="ops", key="s-inline", text="hello", user=user)
    assert hops == [] and m.Turn.objects.get(pk=first.turn_id).status == "queued"
    services.turn_start(agent="ops", key="s-inline", text="again", user=user, replace=True)
    assert len(hops) == 1
    assert m.Turn.objects.get(pk=first.turn_id).status == "cancelled"
