"""The demo site's own URLs (june_project/urls.py): the admin's pages name no icon, so each
visit asked for /favicon.ico, a "Not Found" line in the server's log every time."""

from __future__ import annotations

import logging

import pytest

pytestmark = pytest.mark.django_db


def test_the_icon_is_nothing_not_a_404(client, caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = client.get("/favicon.ico")
    assert response.status_code == 204 and response.content == b""
    assert "max-age" in response["Cache-Control"]
    assert not [r for r in caplog.records if "favicon" in r.getMessage()]
