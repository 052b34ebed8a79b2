"""Test-process defaults, set before Django's settings load."""

import os

os.environ.setdefault("SECRET_KEY", "june-test-secret-key")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
os.environ.setdefault("JUNE_DEMO_DELAY", "0")
