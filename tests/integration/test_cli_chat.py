"""``manage.py june chat`` off its path: a session key the site's URLs and API refuse (spaces,
say) made a session no page or API call could ever open again; it is refused as they refuse it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app import models as m

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("key", ["bad key with spaces", ".dot-first", "x" * 201, "ünïcode"])
def test_a_session_key_the_site_refuses_is_refused_on_the_command_line(key):
    with pytest.raises(CommandError, match="a session key is 1-200 characters"):
        call_command("june", "chat", "ops", key, "hi")
    assert not m.Session.objects.exists()
