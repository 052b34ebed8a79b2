"""A front end on another origin: CORS is off unless ``JUNE_CORS_ALLOWED_ORIGINS`` names origins
(django-cors-headers, the ``cors`` extra), and then only those origins are allowed, on the API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parents[2]
PREFLIGHT = {
    "HTTP_ORIGIN": "https://app.example",
    "HTTP_ACCESS_CONTROL_REQUEST_METHOD": "POST",
    "HTTP_ACCESS_CONTROL_REQUEST_HEADERS": "authorization, content-type",
}


def _site_settings(**env: str) -> dict:
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'middleware': s.MIDDLEWARE, 'apps': s.INSTALLED_APPS, "
        "'origins': s.CORS_ALLOWED_ORIGINS}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JUNE_CORS")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "june_project.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_nothing_is_open_by_default():
    site = _site_settings()
    assert site["origins"] == [] and "corsheaders" not in site["apps"]
    assert not any("cors" in mw for mw in site["middleware"])


def test_the_setting_turns_on_django_cors_headers_for_the_listed_origins():
    site = _site_settings(JUNE_CORS_ALLOWED_ORIGINS="https://app.example, https://b.example")
    assert site["origins"] == ["https://app.example", "https://b.example"] and "corsheaders" in site["apps"]
    assert site["middleware"][1] == "corsheaders.middleware.CorsMiddleware"


@pytest.mark.django_db
def test_a_listed_origin_may_call_the_api_and_another_may_not():
    middleware = [settings.MIDDLEWARE[0], "corsheaders.middleware.CorsMiddleware", *settings.MIDDLEWARE[1:]]
    with override_settings(
        MIDDLEWARE=middleware, CORS_ALLOWED_ORIGINS=["https://app.example"], CORS_URLS_REGEX=r"^/api/"
    ):
        allowed = Client().options("/api/agents/ops/chat", **PREFLIGHT)
        assert allowed["Access-Control-Allow-Origin"] == "https://app.example"
        assert "authorization" in allowed["Access-Control-Allow-Headers"]
        other = Client().options("/api/agents/ops/chat", **{**PREFLIGHT, "HTTP_ORIGIN": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in other
    # and without the setting (the default), no origin is allowed
    assert "Access-Control-Allow-Origin" not in Client().options("/api/agents/ops/chat", **PREFLIGHT)
